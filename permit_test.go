package ratelimit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/conformance"
	"github.com/ratelimit-go/ratelimit/internal/counted"
)

// A held Permit renews its lease while the work runs, however long, and
// Release gives it back at once; a Limiter of another policy refuses
// permits, and one of an InFlight policy refuses takes. The lease runs on a
// manual clock, moved on only once a renewal was seen: a busy machine that
// delays a renewal delays the test, not its verdict.
func TestAPermitIsRenewedWhileHeld(t *testing.T) {
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	s := counted.New(m)
	clock := conformance.NewManualClock(time.Unix(1_700_000_000, 0))
	const lease = 30 * time.Millisecond // renewed every 10ms of real time
	l, err := ratelimit.New(s, ratelimit.Concurrency(1, lease), ratelimit.WithCallerClock(clock.Now))
	require.NoError(t, err)
	ctx := context.Background()
	p, d, err := l.Acquire(ctx, "job")
	require.NoError(t, err)
	require.NotNil(t, p)
	require.True(t, d.Allowed)
	require.Equal(t, 1, d.Count)
	for range 5 {
		seen := s.Acquires.Load()
		require.Eventually(t, func() bool { return s.Acquires.Load() > seen+1 }, 10*time.Second, time.Millisecond, "a renewal")
		clock.Advance(lease * 9 / 10) // past what the lease was before the renewal
		other, d, err := l.Acquire(ctx, "job")
		require.NoError(t, err)
		require.Nil(t, other, "held past its first lease: renewed")
		require.False(t, d.Allowed)
		require.False(t, p.Lost())
	}
	require.NoError(t, p.Release(ctx))
	require.NoError(t, p.Release(ctx), "twice: nothing more")
	next, _, err := l.Acquire(ctx, "job")
	require.NoError(t, err)
	require.NotNil(t, next, "released: free at once")
	require.NoError(t, next.Release(ctx))

	_, err = l.Allow(ctx, "job")
	require.Error(t, err, "permits are acquired, not taken")
	rate, err := ratelimit.New(m, ratelimit.PerSecond(5))
	require.NoError(t, err)
	_, _, err = rate.Acquire(ctx, "job")
	require.ErrorIs(t, err, ratelimit.ErrInvalidPolicy)
}

// stalling fails the renewals of the first permit it saw while stalled: a
// store that cannot answer that holder.
type stalling struct {
	backend.Store
	first   atomic.Int64
	stalled atomic.Bool
}

func (s *stalling) Acquire(ctx context.Context, req backend.Request, id int64) (backend.Outcome, error) {
	s.first.CompareAndSwap(0, id)
	if s.stalled.Load() && id == s.first.Load() {
		return backend.Outcome{}, errors.New("connection refused")
	}
	return s.Store.Acquire(ctx, req, id)
}

// A permit whose renewals failed until its lease ended, and whose place
// another holder then took, says so (Lost): its work now runs past the
// limit.
func TestAPermitWhoseLeaseEndedIsLost(t *testing.T) {
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	s := &stalling{Store: m}
	const lease = 30 * time.Millisecond
	l, err := ratelimit.New(s, ratelimit.Concurrency(1, lease))
	require.NoError(t, err)
	ctx := context.Background()
	p, _, err := l.Acquire(ctx, "job")
	require.NoError(t, err)
	s.stalled.Store(true) // its renewals fail
	var other *ratelimit.Permit
	require.Eventually(t, func() bool {
		other, _, err = l.Acquire(ctx, "job")
		return err == nil && other != nil
	}, 5*time.Second, time.Millisecond, "the ended lease's place")
	require.False(t, p.Lost(), "a failed renewal is tried again")
	s.stalled.Store(false)
	require.Eventually(t, p.Lost, 5*time.Second, time.Millisecond, "the next renewal finds it taken")
	require.NoError(t, other.Release(ctx))
	require.NoError(t, p.Release(ctx))
}
