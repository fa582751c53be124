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
	s := memory.New(memory.WithSweepInterval(0))
	t.Cleanup(func() { _ = s.Close() })
	now := time.Unix(1_700_000_000, 0)
	return s, func() time.Time { return now }
}

func TestObserverSeesEveryDecision(t *testing.T) {
	s, clock := newMemory(t)
	rec := &recorder{}
	l, err := ratelimit.New(s, ratelimit.PerMinute(2), ratelimit.WithClock(clock), ratelimit.WithName("per-user"), ratelimit.WithObserver(rec))
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
	denial := rec.events[2]
	require.False(t, denial.Decision.Allowed)
	require.Equal(t, "alice", denial.Key, "a denial is traced to its key")
	require.Equal(t, "per-user", denial.Name, "and to its policy")
	require.Equal(t, ratelimit.PerMinute(2), denial.Policy)
	require.Equal(t, 1, denial.Cost)
	require.Equal(t, 0, rec.events[3].Cost, "a peek")
	for _, e := range rec.events {
		require.NoError(t, e.Err)
		require.Positive(t, e.Latency)
	}
}

func TestFailsClosedByDefaultAndOpenWhenAsked(t *testing.T) {
	cause := errors.New("connection refused")
	ctx := context.Background()
	for _, open := range []bool{false, true} {
		rec := &recorder{}
		opts := []ratelimit.Option{ratelimit.WithObserver(rec)}
		if open {
			opts = append(opts, ratelimit.WithFailOpen())
		}
		l, err := ratelimit.New(failingStore{cause}, ratelimit.PerSecond(5), opts...)
		require.NoError(t, err)
		d, err := l.Allow(ctx, "user")
		require.ErrorIs(t, err, ratelimit.ErrStore, "the error is returned either way")
		require.ErrorIs(t, err, cause)
		require.Equal(t, open, d.Allowed, "fail open: %v", open)
		require.Len(t, rec.events, 1)
		require.ErrorIs(t, rec.events[0].Err, cause, "the observer sees the error")
		_, err = l.AllowN(ctx, "user", 6)
		require.ErrorIs(t, err, ratelimit.ErrInvalidCost, "bad input is never admitted, even failing open")
	}
}

func TestDryRunAdmitsButDecidesAndRecordsForReal(t *testing.T) {
	s, clock := newMemory(t)
	rec := &recorder{}
	l, err := ratelimit.New(s, ratelimit.PerMinute(2), ratelimit.WithClock(clock), ratelimit.WithDryRun(), ratelimit.WithObserver(rec))
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
	plain, err := ratelimit.New(s, ratelimit.PerMinute(2), ratelimit.WithClock(clock))
	require.NoError(t, err)
	d, err := plain.Peek(ctx, "user")
	require.NoError(t, err)
	require.Equal(t, 2, d.Count, "only what the policy admits is recorded")
}

func TestMultiAdmitsOnlyWhenAllAdmit(t *testing.T) {
	s, clock := newMemory(t)
	ctx := context.Background()
	perUser, err := ratelimit.New(s, ratelimit.PerMinute(5), ratelimit.WithClock(clock), ratelimit.WithName("per-user"), ratelimit.WithPrefix("u:"))
	require.NoError(t, err)
	perIP, err := ratelimit.New(s, ratelimit.PerMinute(3), ratelimit.WithClock(clock), ratelimit.WithName("per-ip"), ratelimit.WithPrefix("ip:"))
	require.NoError(t, err)
	m, err := ratelimit.NewMulti(perUser, perIP)
	require.NoError(t, err)

	for i := 1; i <= 3; i++ {
		d, err := m.Allow(ctx, "alice", "10.0.0.1")
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.Equal(t, "per-ip", d.Name, "the fewest remaining decides")
		require.Equal(t, 3-i, d.Remaining)
		require.Len(t, d.Decisions, 2)
	}
	d, err := m.Allow(ctx, "alice", "10.0.0.1")
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Equal(t, "per-ip", d.Name, "which policy denied")
	require.Positive(t, d.RetryAfter)
	u, err := perUser.Peek(ctx, "alice")
	require.NoError(t, err)
	require.Equal(t, 3, u.Count, "the denial consumed nothing from per-user")

	// Another IP: the user has 2 left, so AllowN(3) is denied by per-user.
	d, err = m.AllowN(ctx, 3, "alice", "10.0.0.2")
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Equal(t, "per-user", d.Name)
	ip, err := perIP.Peek(ctx, "10.0.0.2")
	require.NoError(t, err)
	require.Equal(t, 0, ip.Count, "nothing consumed from per-ip")

	d, err = m.AllowN(ctx, 2, "alice", "10.0.0.2")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, 0, d.Remaining)
	require.Equal(t, "per-user", d.Name)
}

func TestMultiRejectsBadInputAndRecordsNothing(t *testing.T) {
	s, clock := newMemory(t)
	ctx := context.Background()
	a, _ := ratelimit.New(s, ratelimit.PerMinute(5), ratelimit.WithClock(clock), ratelimit.WithPrefix("a:"))
	b, _ := ratelimit.New(s, ratelimit.PerMinute(3), ratelimit.WithClock(clock), ratelimit.WithPrefix("b:"))
	m, err := ratelimit.NewMulti(a, b)
	require.NoError(t, err)
	_, err = m.Allow(ctx, "only-one")
	require.ErrorIs(t, err, ratelimit.ErrInvalidArgument)
	_, err = m.Allow(ctx, "k", "")
	require.ErrorIs(t, err, ratelimit.ErrInvalidKey)
	_, err = m.AllowN(ctx, 4, "k", "k")
	require.ErrorIs(t, err, ratelimit.ErrInvalidCost, "4 is over the second limit")
	d, err := a.Peek(ctx, "k")
	require.NoError(t, err)
	require.Zero(t, d.Count)
	_, err = ratelimit.NewMulti()
	require.ErrorIs(t, err, ratelimit.ErrInvalidArgument)
	_, err = ratelimit.NewMulti(a, nil)
	require.ErrorIs(t, err, ratelimit.ErrInvalidArgument)
}
