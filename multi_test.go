package ratelimit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
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
		broken, err := ratelimit.New(failingStore{errors.New("connection refused")}, ratelimit.PerMinute(5), opts...)
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
