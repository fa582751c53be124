package ratelimit_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
)

func TestPolicyValidation(t *testing.T) {
	for _, tc := range []struct {
		policy ratelimit.Policy
		valid  bool
	}{
		{ratelimit.PerSecond(1), true},
		{ratelimit.PerMinute(100), true},
		{ratelimit.PerHour(5000), true},
		{ratelimit.Policy{Limit: 1, Window: time.Millisecond, Algorithm: ratelimit.FixedWindow}, true},
		{ratelimit.Policy{Limit: 0, Window: time.Second}, false},
		{ratelimit.Policy{Limit: -3, Window: time.Second}, false},
		{ratelimit.Policy{Limit: 1, Window: 0}, false},
		{ratelimit.Policy{Limit: 1, Window: -time.Second}, false},
		{ratelimit.Policy{Limit: 1, Window: 999 * time.Microsecond}, false},
		{ratelimit.Policy{Limit: 1, Window: time.Second, Algorithm: 9}, false},
		{ratelimit.Concurrency(10, time.Minute), true},
		{ratelimit.Concurrency(ratelimit.MaxLogLimit+1, time.Minute), false},
		{ratelimit.Policy{Limit: ratelimit.MaxLimit, Window: ratelimit.MaxWindow, Algorithm: ratelimit.SlidingWindowCounter}, true},
		{ratelimit.Policy{Limit: ratelimit.MaxLimit + 1, Window: time.Second, Algorithm: ratelimit.FixedWindow}, false},
		{ratelimit.Policy{Limit: 10, Window: ratelimit.MaxWindow + time.Microsecond, Algorithm: ratelimit.FixedWindow}, true},
		{ratelimit.Policy{Limit: 10, Window: ratelimit.MaxFixedWindow, Algorithm: ratelimit.FixedWindow}, true},
		{ratelimit.Policy{Limit: 10, Window: ratelimit.MaxFixedWindow + time.Microsecond, Algorithm: ratelimit.FixedWindow}, false},
		{ratelimit.Policy{Limit: 10, Window: ratelimit.MaxWindow + time.Microsecond, Algorithm: ratelimit.SlidingWindowCounter}, false},
		{ratelimit.Policy{Limit: 10, Window: ratelimit.MaxWindow + time.Microsecond, Algorithm: ratelimit.SlidingWindow}, false},
		{ratelimit.TokenBucket(10, ratelimit.MaxWindow+time.Microsecond, 10), false},
		{ratelimit.Policy{Limit: ratelimit.MaxLogLimit, Window: time.Hour}, true},
		{ratelimit.Policy{Limit: ratelimit.MaxLogLimit + 1, Window: time.Hour}, false},
		{ratelimit.Policy{Limit: 10, Window: time.Second, Burst: 5}, false},
		{ratelimit.TokenBucket(10, time.Second, 20), true},
		{ratelimit.TokenBucket(10, time.Second, 0), false},
		{ratelimit.TokenBucket(10, time.Second, -1), false},
		{ratelimit.TokenBucket(0, time.Second, 1), false},
		{ratelimit.TokenBucket(3, time.Second, ratelimit.MaxLimit), false}, // 1e6 µs per 3 requests: units too fine for that burst
		{ratelimit.TokenBucket(ratelimit.MaxLimit, 4*ratelimit.MaxLimit*time.Microsecond, ratelimit.MaxLimit), true},
	} {
		err := tc.policy.Validate()
		if tc.valid {
			require.NoError(t, err, tc.policy.String())
		} else {
			require.ErrorIs(t, err, ratelimit.ErrInvalidPolicy, tc.policy.String())
		}
	}
	require.Equal(t, "100 per 1m0s (sliding)", ratelimit.PerMinute(100).String())
	require.Equal(t, "10 per 1s, burst 20 (gcra)", ratelimit.TokenBucket(10, time.Second, 20).String())
}

func TestPrefixValidation(t *testing.T) {
	for _, prefix := range []string{"", "x{}:", strings.Repeat("p", ratelimit.MaxPrefixLen)} {
		_, err := ratelimit.New(failingStore{}, ratelimit.PerSecond(1), ratelimit.WithPrefix(prefix))
		require.NoError(t, err, "%q", prefix)
	}
	// Once sent whole with every call (10 MiB were accepted).
	_, err := ratelimit.New(failingStore{}, ratelimit.PerSecond(1), ratelimit.WithPrefix(strings.Repeat("p", 10<<20)))
	require.ErrorIs(t, err, ratelimit.ErrInvalidKey)
}

// failingStore is a Store whose server is gone.
type failingStore struct {
	backend.Unimplemented
	err error
}

func (f failingStore) Take(context.Context, backend.Request) (backend.Outcome, error) {
	return allowed(), f.err
}
func (f failingStore) Peek(context.Context, backend.Request) (backend.Outcome, error) {
	return allowed(), f.err
}
func (f failingStore) Reset(context.Context, string, string) error { return f.err }

func allowed() backend.Outcome { return backend.Outcome{At: 1} } // RetryAfter 0: an admission

func TestStoreErrorsAreWrappedNeverDecisions(t *testing.T) {
	cause := errors.New("connection refused")
	l, err := ratelimit.New(failingStore{err: cause}, ratelimit.PerSecond(1))
	require.NoError(t, err)
	d, err := l.Allow(context.Background(), "user")
	require.ErrorIs(t, err, ratelimit.ErrStore)
	require.ErrorIs(t, err, cause)
	require.Equal(t, ratelimit.Decision{}, d, "no decision comes with an error")
	_, err = l.Peek(context.Background(), "user")
	require.ErrorIs(t, err, cause)
	require.ErrorIs(t, l.Reset(context.Background(), "user"), ratelimit.ErrStore)
}

func TestWindowsAreKeptToTheMicrosecond(t *testing.T) {
	l, err := ratelimit.New(failingStore{}, ratelimit.Policy{Limit: 1, Window: time.Second + 1500*time.Nanosecond})
	require.NoError(t, err)
	require.Equal(t, time.Second+time.Microsecond, l.Policy().Window)
}

// deadlineStore records the deadline of every call's context.
type deadlineStore struct {
	failingStore
	deadlines []time.Duration // until the deadline, or -1 for none
}

func (s *deadlineStore) Take(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	until := time.Duration(-1)
	if d, ok := ctx.Deadline(); ok {
		until = time.Until(d)
	}
	s.deadlines = append(s.deadlines, until)
	return allowed(), nil
}

func TestEveryStoreCallHasATimeBudget(t *testing.T) {
	s := &deadlineStore{}
	l, err := ratelimit.New(s, ratelimit.PerSecond(5))
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "k")
	require.NoError(t, err)
	require.Positive(t, s.deadlines[0], "a context without a deadline gets one")
	require.LessOrEqual(t, s.deadlines[0], ratelimit.DefaultTimeout)

	short, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err = l.Allow(short, "k")
	require.NoError(t, err)
	require.LessOrEqual(t, s.deadlines[1], 10*time.Millisecond, "the caller's earlier deadline is kept")

	l, err = ratelimit.New(s, ratelimit.PerSecond(5), ratelimit.WithTimeout(time.Second))
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "k")
	require.NoError(t, err)
	require.Greater(t, s.deadlines[2], ratelimit.DefaultTimeout, "WithTimeout sets the budget")

	for _, d := range []time.Duration{0, -time.Second} {
		_, err = ratelimit.New(s, ratelimit.PerSecond(5), ratelimit.WithTimeout(d))
		require.ErrorIs(t, err, ratelimit.ErrInvalidArgument, "timeout %v", d)
	}
}

// New reports an invalid policy as one, whatever the options, and a
// retention out of its bounds.
func TestNewValidatesThePolicyAndTheRetention(t *testing.T) {
	for _, p := range []ratelimit.Policy{{Limit: 1}, {Limit: 1, Window: -time.Second}, {Limit: 0, Window: time.Second}} {
		_, err := ratelimit.New(failingStore{}, p)
		require.ErrorIs(t, err, ratelimit.ErrInvalidPolicy, "%+v", p)
	}
	for _, d := range []time.Duration{-time.Second, ratelimit.MaxWindow + time.Second} {
		_, err := ratelimit.New(failingStore{}, ratelimit.PerMinute(1), ratelimit.WithRetention(d))
		require.ErrorIs(t, err, ratelimit.ErrInvalidArgument, "retention %v", d)
	}
	l, err := ratelimit.New(failingStore{}, ratelimit.PerMinute(1), ratelimit.WithRetention(time.Second))
	require.NoError(t, err, "a window longer than the retention keeps its state for its window")
	require.ErrorIs(t, l.SetPolicy(ratelimit.Policy{Limit: 1, Window: ratelimit.MaxWindow + time.Hour}), ratelimit.ErrInvalidPolicy)
	require.Equal(t, ratelimit.PerMinute(1), l.Policy(), "a refused policy changes nothing")
}

// SetPolicy takes any valid policy without foresight at New: a longer window
// counts the history the store kept, and keeps its own for its window. The
// store decides on a clock of the test's, which its sweeper goes by too, so
// that a machine that stalls the test cannot expire the state meanwhile.
func TestSetPolicyToALongerWindowNeedsNoForesight(t *testing.T) {
	var nanos atomic.Int64
	nanos.Store(time.Unix(1_700_000_000, 0).UnixNano())
	clock := func() time.Time { return time.Unix(0, nanos.Load()) }
	s, err := memory.New(memory.WithStoreClock(clock))
	require.NoError(t, err)
	defer s.Close()
	l, err := ratelimit.New(s, ratelimit.PerSecond(10))
	require.NoError(t, err)
	ctx := context.Background()
	for range 10 {
		d, err := l.Allow(ctx, "k")
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	require.NoError(t, l.SetPolicy(ratelimit.PerMinute(10)), "a minute after a second, with no WithRetention")
	require.Equal(t, ratelimit.PerMinute(10), l.Policy())
	nanos.Add(int64(500 * time.Millisecond))
	d, err := l.Allow(ctx, "k")
	require.NoError(t, err)
	require.False(t, d.Allowed, "the ten of the last second are still kept, and count")
	require.Equal(t, 10, d.Count)
	require.Equal(t, time.Minute-500*time.Millisecond, d.RetryAfter, "until the first leaves the minute")
	nanos.Add(int64(time.Minute))
	d, err = l.Allow(ctx, "k")
	require.NoError(t, err)
	require.True(t, d.Allowed, "a minute later")
}

// The library's module requires none of the optional parts' heavy
// dependencies (they live in the grpclimit, promlimit and tools/containers
// modules), so a program importing it does not have them in its module
// graph (it once had Docker's, Prometheus's...: 50 modules, now 18).
func TestTheLibraryModuleRequiresNoHeavyDependency(t *testing.T) {
	mod, err := os.ReadFile("go.mod")
	require.NoError(t, err)
	for _, heavy := range []string{"docker", "dockertest", "prometheus", "google.golang.org/grpc", "containerd"} {
		require.NotContains(t, string(mod), heavy)
	}
}

// The user's Algorithm and the contract's are converted by value: the same
// numbers name the same algorithms.
func TestAlgorithmsAreTheContracts(t *testing.T) {
	algs := backend.Algorithms()
	require.Len(t, algs, len(backend.Algorithms()))
	for i, a := range backend.Algorithms() {
		require.Equal(t, uint8(a), uint8(algs[i]))
		require.Equal(t, a.String(), algs[i].String())
	}
	require.Equal(t, uint8(backend.GCRA), uint8(ratelimit.GCRA))
	require.Equal(t, uint8(backend.SlidingWindowCounter), uint8(ratelimit.SlidingWindowCounter))
}
