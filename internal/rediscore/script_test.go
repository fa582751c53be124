package rediscore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
)

// A panic of the client comes back as an error wrapping ErrStore.
func TestRecoverTurnsAPanicIntoAStoreError(t *testing.T) {
	err := func() (err error) {
		defer Recover("ratelimit/test", &err)
		panic("multi key command with different key slots are not allowed")
	}()
	require.True(t, errors.Is(err, ratelimit.ErrStore), "%v", err)
	require.ErrorContains(t, err, "ratelimit/test: the client panicked: multi key command")
}

// Bounded returns at the context's deadline while the call blocks (as
// valkey-go's does on a full ring), and a panic on its goroutine comes back
// as an error.
func TestBoundedReturnsAtTheDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := Bounded(ctx, "ratelimit/test", false, func(context.Context) (int, error) {
		<-release // ignores its context
		return 1, nil
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)

	long, cancelLong := context.WithTimeout(context.Background(), time.Minute)
	defer cancelLong()
	_, err = Bounded(long, "ratelimit/test", false, func(context.Context) (int, error) { panic("boom") })
	require.ErrorIs(t, err, ratelimit.ErrStore, "a panic on the call's goroutine")
	require.ErrorContains(t, err, "boom")
}

// go-redis can notice a deadline as a network "i/o timeout": the stores
// wrap the context's error too, so that the caller can tell (seen once in
// CI: the stalled-server test got an error that was not DeadlineExceeded).
func TestWithContextNamesTheDeadline(t *testing.T) {
	ioTimeout := errors.New("i/o timeout")
	done, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	require.ErrorIs(t, WithContext(done, ioTimeout), context.DeadlineExceeded)
	require.ErrorIs(t, WithContext(done, ioTimeout), ioTimeout)
	require.NoError(t, WithContext(done, nil))
	require.Equal(t, ioTimeout, WithContext(context.Background(), ioTimeout), "a live context adds nothing")
	wrapped := fmt.Errorf("x: %w", context.DeadlineExceeded)
	require.Equal(t, wrapped, WithContext(done, wrapped), "already said")

	// A standard context's Err turns non-nil when its timer's goroutine
	// runs, which a busy machine delays past the connection's deadline: CI
	// once got a bare "i/o timeout" from the stalled-server test.
	require.ErrorIs(t, WithContext(timerLate{}, ioTimeout), context.DeadlineExceeded)
}

// timerLate is a context whose deadline has passed and whose timer has
// not fired yet.
type timerLate struct{ context.Context }

func (timerLate) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }
func (timerLate) Err() error                  { return nil }
func (timerLate) Done() <-chan struct{}       { return nil }
func (timerLate) Value(any) any               { return nil }

// Tag is what a cluster hashes for every server key of a caller's key.
func TestTagIsTheHashTagOfEveryKey(t *testing.T) {
	for _, key := range []string{"user42", "{user42}", "}x", "a{b}c", "%7B", "{", "}", "a}b{c"} {
		for _, k := range lua.AllKeys("p{x}:", key) {
			require.Equal(t, lua.HashTag(k), lua.Tag(key), "key %q, server key %q", key, k)
		}
	}
}

// TakeApart decides groups at most maxParallel at once, whatever the number
// of keys a request carries (a client controls it), and gathers every
// group's outcomes in the requests' order.
func TestTakeApartBoundsTheGroupsInFlight(t *testing.T) {
	rule, err := backend.NewRule(backend.FixedWindow, 5, time.Minute, 0, time.Minute, "p:")
	require.NoError(t, err)
	reqs := make([]backend.Request, 500)
	for i := range reqs {
		reqs[i] = backend.Request{Rule: rule, Key: fmt.Sprint("k", i), Cost: 1}
	}
	var inFlight, most atomic.Int64
	var mu sync.Mutex
	decide := func(_ context.Context, group []backend.Request, op lua.Op, outs []backend.Outcome) error {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		mu.Lock()
		most.Store(max(most.Load(), n))
		mu.Unlock()
		time.Sleep(time.Millisecond)
		for i, r := range group {
			var k int64
			fmt.Sscanf(r.Key, "k%d", &k)
			outs[i] = backend.Outcome{Count: k, At: 1}
		}
		return nil
	}
	outs := make([]backend.Outcome, len(reqs))
	require.NoError(t, TakeApart(context.Background(), reqs, outs, decide))
	require.LessOrEqual(t, most.Load(), int64(maxParallel), "groups in flight at once")
	for i, o := range outs {
		require.Equal(t, int64(i), o.Count, "request %d's outcome in its place", i)
	}
}
