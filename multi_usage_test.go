package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/internal/counted"
)

// withoutChargeAll is a store that cannot charge several requests together.
type withoutChargeAll struct{ backend.Store }

func (withoutChargeAll) ChargeAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) error {
	return backend.Unimplemented{}.ChargeAll(ctx, reqs, outs)
}

// chargeMulti is a Multi of three policies (tokens a minute, an hour, and a
// bucket) on s, each under a prefix of its own, and its Limiters.
func chargeMulti(t *testing.T, s backend.Store) (*ratelimit.Multi, []*ratelimit.Limiter) {
	t.Helper()
	var limiters []*ratelimit.Limiter
	for i, p := range []ratelimit.Policy{ratelimit.PerMinute(1000), ratelimit.PerHour(5000), ratelimit.TokenBucket(2000, time.Minute, 2000)} {
		l, err := ratelimit.New(s, p, ratelimit.WithPrefix(string(rune('a'+i))+":"), ratelimit.WithName(p.String()))
		require.NoError(t, err)
		limiters = append(limiters, l)
	}
	m, err := ratelimit.NewMulti(limiters...)
	require.NoError(t, err)
	return m, limiters
}

// Multi.ChargeN (the tokens a response used, under each of a caller's
// policies) charges a store that charges several requests in one call once
// (on a server, one round trip where it took one per policy), and one by
// one a store that cannot; the decisions are the same either way, each
// policy's own Charge's, and every charge is recorded.
func TestMultiChargeNIsOneCall(t *testing.T) {
	ctx, keys := context.Background(), []string{"user", "user", "tenant"}
	var answers [2][]ratelimit.MultiDecision
	for k, noChargeAll := range []bool{false, true} {
		m, err := memory.New()
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		var next backend.Store = m
		if noChargeAll {
			next = withoutChargeAll{m}
		}
		s := counted.New(next)
		multi, _ := chargeMulti(t, s)
		for _, n := range []int{600, 300, 200, 1500} {
			md, err := multi.ChargeN(ctx, keys, n)
			require.NoError(t, err)
			answers[k] = append(answers[k], md)
		}
		if noChargeAll {
			require.EqualValues(t, 12, s.Charges.Load(), "one by one")
		} else {
			require.EqualValues(t, 4, s.ChargeAlls.Load(), "one call a ChargeN")
			require.Zero(t, s.Charges.Load(), "and no Charge")
		}
		md, err := multi.Peek(ctx, keys...)
		require.NoError(t, err)
		require.Equal(t, 2600, md.Decisions[1].Count, "every charge recorded")
		answers[k] = append(answers[k], md)
	}
	for i := range answers[0] { // the charges, then the peeks after them
		one, each := answers[0][i], answers[1][i]
		require.Equal(t, each.Allowed, one.Allowed, "charge %d", i)
		for j := range one.Decisions {
			a, b := one.Decisions[j], each.Decisions[j]
			require.Equal(t, []any{b.Allowed, b.Count, b.Remaining, b.Limit}, []any{a.Allowed, a.Count, a.Remaining, a.Limit}, "charge %d, policy %d", i, j)
		}
	}
	require.True(t, answers[0][0].Allowed && answers[0][1].Allowed, "600, then 900: within a minute's 1,000")
	require.False(t, answers[0][2].Allowed || answers[0][3].Allowed, "1,100 then 2,600 a minute: over")
}

// shardFails is a store whose ChargeAll makes the first request's charge and
// fails on the shard of the others, as a cluster's may.
type shardFails struct{ backend.Store }

func (s shardFails) ChargeAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) error {
	var err error
	if outs[0], err = s.Store.Charge(ctx, reqs[0]); err != nil {
		return err
	}
	return &backend.ShardError{Prefix: reqs[1].Rule.Prefix(), Key: reqs[1].Key, Err: errors.New("the node is down")}
}

// A ChargeN whose call fails on one shard of a cluster after others
// charged: the charges made are answered as made, and the policies whose
// shard failed return the store's error; none is charged twice or
// reported charged when it was not.
func TestMultiChargeNKeepsTheChargesAShardMade(t *testing.T) {
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	multi, limiters := chargeMulti(t, shardFails{m})
	ctx, keys := context.Background(), []string{"user", "user", "tenant"}
	md, err := multi.ChargeN(ctx, keys, 400)
	require.ErrorIs(t, err, ratelimit.ErrStore)
	require.True(t, md.Decisions[0].Allowed, "the charge made")
	require.Equal(t, 400, md.Decisions[0].Count)
	require.Equal(t, ratelimit.SourceStore, md.Decisions[0].Source)
	require.Zero(t, md.Decisions[1].Count, "not made: no decision")
	require.True(t, md.Decisions[1].At.IsZero() && md.Decisions[2].At.IsZero())
	for i, want := range []int{400, 0, 0} {
		d, err := limiters[i].Peek(ctx, keys[i])
		require.NoError(t, err)
		require.Equal(t, want, d.Count, "policy %d: charged once, or not at all", i)
	}
}

// A Multi with a Limiter in dry-run mode (a shadow rule's) still charges in
// one call: a charge has no all-or-nothing for a dry run to hold back.
func TestMultiChargeNOfADryRunIsOneCall(t *testing.T) {
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	s := counted.New(m)
	enforced, err := ratelimit.New(s, ratelimit.PerMinute(10), ratelimit.WithPrefix("enforced:"))
	require.NoError(t, err)
	shadow, err := ratelimit.New(s, ratelimit.PerMinute(10), ratelimit.WithPrefix("shadow:"), ratelimit.WithDryRun())
	require.NoError(t, err)
	multi, err := ratelimit.NewMulti(enforced, shadow)
	require.NoError(t, err)
	md, err := multi.ChargeN(context.Background(), []string{"user", "user"}, 25)
	require.NoError(t, err)
	require.EqualValues(t, 1, s.ChargeAlls.Load())
	require.Zero(t, s.Charges.Load())
	require.False(t, md.Decisions[0].Allowed, "25 of 10: over")
	require.True(t, md.Decisions[1].Allowed, "a dry run admits")
}
