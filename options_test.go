package ratelimit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
)

// recorder is an Observer keeping every Event.
type recorder struct {
	mu     sync.Mutex
	events []ratelimit.Event
}

func (r *recorder) Observe(_ context.Context, e ratelimit.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func newMemory(t *testing.T) (*memory.Store, func() time.Time) {
	s, err := memory.New(memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	now := time.Unix(1_700_000_000, 0)
	return s, func() time.Time { return now }
}

func TestObserverSeesEveryDecision(t *testing.T) {
	s, clock := newMemory(t)
	rec := &recorder{}
	l, err := ratelimit.New(s, ratelimit.PerMinute(2), ratelimit.WithCallerClock(clock), ratelimit.WithName("per-user"), ratelimit.WithObserver(rec))
	require.NoError(t, err)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		_, err := l.Allow(ctx, "alice")
		require.NoError(t, err)
	}
	_, err = l.Peek(ctx, "alice")
	require.NoError(t, err)
	_, err = l.Allow(ctx, "")
	require.Error(t, err)

	require.Len(t, rec.events, 4, "three Allows and a Peek; bad input is not a decision")
	require.Equal(t, ratelimit.OpPeek, rec.events[3].Op)
	denial := rec.events[2]
	require.False(t, denial.Decision.Allowed)
	require.Equal(t, "alice", denial.Key, "a denial is traced to its key")
	require.Equal(t, "per-user", denial.Name, "and to its policy")
	require.Equal(t, ratelimit.PerMinute(2), denial.Policy)
	require.Equal(t, 1, denial.Cost)
	require.Equal(t, 1, rec.events[3].Cost, "a peek of cost 1")
	for _, e := range rec.events {
		require.NoError(t, e.Err)
		require.Positive(t, e.Latency)
	}
}

// Failing open was once an admitted Decision together with an error, which
// the usual `if err != nil` turned back into failing closed. A failure mode's
// decision is an answer: a nil error, and a Source that says what made it.
func TestFailsClosedByDefaultAndOpenWhenAsked(t *testing.T) {
	cause := errors.New("connection refused")
	ctx := context.Background()
	for _, open := range []bool{false, true} {
		rec := &recorder{}
		opts := []ratelimit.Option{ratelimit.WithObserver(rec)}
		if open {
			opts = append(opts, ratelimit.WithFailOpen())
		}
		l, err := ratelimit.New(failingStore{err: cause}, ratelimit.PerSecond(5), opts...)
		require.NoError(t, err)
		for _, call := range []func() (ratelimit.Decision, error){
			func() (ratelimit.Decision, error) { return l.Allow(ctx, "user") },
			func() (ratelimit.Decision, error) { return l.Peek(ctx, "user") },
			func() (ratelimit.Decision, error) { return l.Wait(ctx, "user") },
		} {
			d, err := call()
			if open {
				require.NoError(t, err, "failing open answers")
				require.True(t, d.Allowed)
				require.Equal(t, ratelimit.SourceFailOpen, d.Source)
				require.Equal(t, 5, d.Limit)
			} else {
				require.ErrorIs(t, err, ratelimit.ErrStore, "failing closed returns the error")
				require.ErrorIs(t, err, cause)
				require.Equal(t, ratelimit.Decision{}, d, "and no decision with it")
			}
		}
		require.Len(t, rec.events, 3)
		for _, e := range rec.events {
			require.ErrorIs(t, e.Err, cause, "the observer sees the error")
			require.Equal(t, open, e.Decision.Allowed)
		}
		_, err = l.AllowN(ctx, "user", 6)
		require.ErrorIs(t, err, ratelimit.ErrInvalidCost, "bad input is never admitted, even failing open")
	}
}

func TestDryRunAdmitsButDecidesAndRecordsForReal(t *testing.T) {
	s, clock := newMemory(t)
	rec := &recorder{}
	l, err := ratelimit.New(s, ratelimit.PerMinute(2), ratelimit.WithCallerClock(clock), ratelimit.WithDryRun(), ratelimit.WithObserver(rec))
	require.NoError(t, err)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		d, err := l.Allow(ctx, "user")
		require.NoError(t, err)
		require.True(t, d.Allowed, "dry run admits request %d", i+1)
		require.Zero(t, d.RetryAfter)
	}
	denied := 0
	for _, e := range rec.events {
		require.True(t, e.DryRun)
		if !e.Decision.Allowed {
			denied++
		}
	}
	require.Equal(t, 3, denied, "the observer sees the 3 requests the limit would deny")
	plain, err := ratelimit.New(s, ratelimit.PerMinute(2), ratelimit.WithCallerClock(clock))
	require.NoError(t, err)
	d, err := plain.Peek(ctx, "user")
	require.NoError(t, err)
	require.Equal(t, 2, d.Count, "only what the policy admits is recorded")
}
