package ratelimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/conformance"
)

// Wait sleeps in real time, so these tests use the store's real clock with
// windows of tens of milliseconds. They assert on the store's decision times
// (Decision.At), not on how long a call took.

func waitLimiter(t *testing.T, p ratelimit.Policy) *ratelimit.Limiter {
	s, err := memory.New(memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l, err := ratelimit.New(s, p)
	require.NoError(t, err)
	return l
}

func TestWaitIsAdmittedWhenTheOldestRequestLeaves(t *testing.T) {
	l := waitLimiter(t, ratelimit.Policy{Limit: 2, Window: 40 * time.Millisecond})
	ctx := context.Background()
	first, err := l.Allow(ctx, "k")
	require.NoError(t, err)
	_, err = l.Allow(ctx, "k")
	require.NoError(t, err)

	d, err := l.Wait(ctx, "k")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.False(t, d.At.Before(first.At.Add(40*time.Millisecond)), "admitted once the first request left the window")
}

func TestWaitAdmitsWaitersWithoutOverAdmitting(t *testing.T) {
	const limit, waiters = 2, 8
	window := 30 * time.Millisecond
	l := waitLimiter(t, ratelimit.Policy{Limit: limit, Window: window})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var mu sync.Mutex
	var admitted []int64
	var wg sync.WaitGroup
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := l.Wait(ctx, "k")
			if !(err == nil && d.Allowed) {
				t.Errorf("Wait: allowed=%v err=%v", d.Allowed, err)
				return
			}
			mu.Lock()
			admitted = append(admitted, d.At.UnixMicro())
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Len(t, admitted, waiters, "every waiter got in")
	require.Zero(t, conformance.OverAdmissions(admitted, ratelimit.Policy{Limit: limit, Window: window}))
}

func TestWaitGivesUpAtOnceWhenTheDeadlineIsTooSoon(t *testing.T) {
	l := waitLimiter(t, ratelimit.Policy{Limit: 1, Window: time.Minute})
	_, err := l.Allow(context.Background(), "k")
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	d, err := l.Wait(ctx, "k")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, ratelimit.Decision{}, d, "an error comes with no decision")
	require.ErrorContains(t, err, "would wait 59.", "the error says how long it would have waited")
	require.NoError(t, ctx.Err(), "it did not sit out its deadline")
}

func TestWaitReturnsWhenTheContextIsCancelled(t *testing.T) {
	l := waitLimiter(t, ratelimit.Policy{Limit: 1, Window: time.Minute})
	_, err := l.Allow(context.Background(), "k")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	d, err := l.Wait(ctx, "k")
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, ratelimit.Decision{}, d)
	p, err := l.Peek(context.Background(), "k")
	require.NoError(t, err)
	require.Equal(t, 1, p.Count, "the wait recorded nothing")
}

func TestWaitRejectsBadInputAtOnce(t *testing.T) {
	l := waitLimiter(t, ratelimit.PerMinute(3))
	ctx := context.Background()
	_, err := l.WaitN(ctx, "k", 4)
	require.ErrorIs(t, err, ratelimit.ErrInvalidCost)
	_, err = l.Wait(ctx, "")
	require.ErrorIs(t, err, ratelimit.ErrInvalidKey)
}
