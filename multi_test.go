package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
)

func TestMultiAdmitsOnlyWhenAllAdmit(t *testing.T) {
	s, clock := newMemory(t)
	ctx := context.Background()
	perUser, err := ratelimit.New(s, ratelimit.PerMinute(5), ratelimit.WithCallerClock(clock), ratelimit.WithName("per-user"), ratelimit.WithPrefix("u:"))
	require.NoError(t, err)
	perIP, err := ratelimit.New(s, ratelimit.PerMinute(3), ratelimit.WithCallerClock(clock), ratelimit.WithName("per-ip"), ratelimit.WithPrefix("ip:"))
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
	d, err = m.AllowN(ctx, []string{"alice", "10.0.0.2"}, 3)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Equal(t, "per-user", d.Name)
	ip, err := perIP.Peek(ctx, "10.0.0.2")
	require.NoError(t, err)
	require.Equal(t, 0, ip.Count, "nothing consumed from per-ip")

	d, err = m.AllowN(ctx, []string{"alice", "10.0.0.2"}, 2)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, 0, d.Remaining)
	require.Equal(t, "per-user", d.Name)
}

func TestMultiRejectsBadInputAndRecordsNothing(t *testing.T) {
	s, clock := newMemory(t)
	ctx := context.Background()
	a, _ := ratelimit.New(s, ratelimit.PerMinute(5), ratelimit.WithCallerClock(clock), ratelimit.WithPrefix("a:"))
	b, _ := ratelimit.New(s, ratelimit.PerMinute(3), ratelimit.WithCallerClock(clock), ratelimit.WithPrefix("b:"))
	m, err := ratelimit.NewMulti(a, b)
	require.NoError(t, err)
	_, err = m.Allow(ctx, "only-one")
	require.ErrorIs(t, err, ratelimit.ErrInvalidArgument)
	_, err = m.Allow(ctx, "k", "")
	require.ErrorIs(t, err, ratelimit.ErrInvalidKey)
	_, err = m.AllowN(ctx, []string{"k", "k"}, 4)
	require.ErrorIs(t, err, ratelimit.ErrInvalidCost, "4 is over the second limit")
	d, err := a.Peek(ctx, "k")
	require.NoError(t, err)
	require.Zero(t, d.Count)
	_, err = ratelimit.NewMulti()
	require.ErrorIs(t, err, ratelimit.ErrInvalidArgument)
	_, err = ratelimit.NewMulti(a, nil)
	require.ErrorIs(t, err, ratelimit.ErrInvalidArgument)
}

// A store that cannot decide several requests together is asked one by one;
// failing open on one policy and closed on none admits, and says so.
func TestMultiWithAFailedStore(t *testing.T) {
	s, clock := newMemory(t)
	ctx := context.Background()
	healthy, err := ratelimit.New(s, ratelimit.PerMinute(5), ratelimit.WithCallerClock(clock), ratelimit.WithName("healthy"))
	require.NoError(t, err)
	for _, open := range []bool{false, true} {
		opts := []ratelimit.Option{ratelimit.WithName("broken")}
		if open {
			opts = append(opts, ratelimit.WithFailOpen())
		}
		broken, err := ratelimit.New(failingStore{err: errors.New("connection refused")}, ratelimit.PerMinute(5), opts...)
		require.NoError(t, err)
		m, err := ratelimit.NewMulti(healthy, broken)
		require.NoError(t, err)
		d, err := m.Allow(ctx, "alice", "alice")
		if !open {
			require.ErrorIs(t, err, ratelimit.ErrStore)
			require.Equal(t, ratelimit.MultiDecision{}, d)
			continue
		}
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.Equal(t, "broken", d.Name, "a failure mode's admission is the one to tell the caller about")
		require.Equal(t, ratelimit.SourceFailOpen, d.Source)
	}
}

// oneByOne is a store that cannot decide several requests together (as a
// cluster's, for keys on different shards): Multi peeks, then takes.
type oneByOne struct{ backend.Store }

func (oneByOne) TakeAll(context.Context, []backend.Request, []backend.Outcome) error {
	return fmt.Errorf("oneByOne: %w", errors.ErrUnsupported)
}

// On a store that decides one by one, each decision Multi makes is observed
// once, and no peek: the peeks are looks. A denied request reports what
// the policies looked at before the denying one hold. Multi's peeks were
// observed as decisions: 96 events for 20 requests over three policies,
// 52 of them peeks, and a denial reported the others as not asked.
func TestMultiObservesEachDecisionOnce(t *testing.T) {
	s, clock := newMemory(t)
	var events, peeks atomic.Int64
	observe := ratelimit.WithObserver(ratelimit.ObserverFunc(func(_ context.Context, e ratelimit.Event) {
		events.Add(1)
		if e.Op == ratelimit.OpPeek {
			peeks.Add(1)
		}
	}))
	var ls []*ratelimit.Limiter
	for i, limit := range []int{30, 12, 30} {
		l, err := ratelimit.New(oneByOne{s}, ratelimit.PerMinute(limit), ratelimit.WithCallerClock(clock), ratelimit.WithPrefix(fmt.Sprint("p", i, ":")), observe)
		require.NoError(t, err)
		ls = append(ls, l)
	}
	m, err := ratelimit.NewMulti(ls...)
	require.NoError(t, err)
	var last ratelimit.MultiDecision
	for i := 0; i < 20; i++ {
		last, err = m.Allow(context.Background(), "ip:1", "token:2", "tenant:3")
		require.NoError(t, err)
		require.Equal(t, i < 12, last.Allowed, "request %d", i)
	}
	require.Equal(t, int64(12*3+8), events.Load(), "three takes a request admitted, the denying take a request denied")
	require.Zero(t, peeks.Load())
	require.Equal(t, 12, last.Decisions[0].Count, "what the first policy holds")
	require.Equal(t, 30-12, last.Decisions[0].Remaining)
	require.Equal(t, 12, last.Decisions[1].Count, "the denial")
	require.False(t, last.Decisions[1].Allowed)
	require.Zero(t, last.Decisions[2], "not asked")
}
