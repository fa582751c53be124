package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
)

// multiAllocs is what one Multi.Allow over n policies of one memory store
// allocates, its keys warm.
func multiAllocs(t *testing.T, n int) float64 {
	s, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	limiters := make([]*ratelimit.Limiter, n)
	keys := make([]string, n)
	for i := range limiters {
		limiters[i], err = ratelimit.New(s, ratelimit.NewPolicy(ratelimit.FixedWindow, 1_000_000, time.Hour), ratelimit.WithPrefix(string(rune('a'+i))+":"))
		require.NoError(t, err)
		keys[i] = "user"
	}
	m, err := ratelimit.NewMulti(limiters...)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = m.Allow(ctx, keys...)
	require.NoError(t, err)
	return testing.AllocsPerRun(1_000, func() { _, _ = m.Allow(ctx, keys...) })
}

// A Multi decision that its store decided in one call (TakeAll) allocates
// as much over three policies as over one: each policy's share of the
// call's error was an allocation though the call had not failed (errors.As's
// target escaped), 5 allocations over one policy and 7 over three; it cost
// ratelimitd one a descriptor, and the GC's work with it.
func TestAMultiDecisionAllocatesNoErrorTargetPerPolicy(t *testing.T) {
	one, three := multiAllocs(t, 1), multiAllocs(t, 3)
	t.Logf("allocations a Multi.Allow: %v over one policy, %v over three", one, three)
	require.Equal(t, one, three, "allocations grow with the policies")
}

// A Multi's Peek and ChargeN that its store answered in one call (PeekAll,
// ChargeAll) allocate the calls' own lists and the answer, and no error
// target: telling a shard's failure apart (errors.As) allocated its target
// on every call, failed or not (5 allocations a call, where 4 are the
// requests, their outcomes, their rules and the answer's two lists less
// what stays on the stack).
func TestAMultiPeekOrChargeAllocatesNoErrorTarget(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	s, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	var limiters []*ratelimit.Limiter
	for _, prefix := range []string{"a:", "b:", "c:"} {
		l, err := ratelimit.New(s, ratelimit.NewPolicy(ratelimit.FixedWindow, 1_000_000, time.Hour), ratelimit.WithPrefix(prefix))
		require.NoError(t, err)
		limiters = append(limiters, l)
	}
	m, err := ratelimit.NewMulti(limiters...)
	require.NoError(t, err)
	ctx, keys := context.Background(), []string{"user", "user", "user"}
	peek := testing.AllocsPerRun(1_000, func() { _, _ = m.Peek(ctx, keys...) })
	charge := testing.AllocsPerRun(1_000, func() { _, _ = m.ChargeN(ctx, keys, 1) })
	require.LessOrEqual(t, peek, 4.0, "a Peek")
	require.LessOrEqual(t, charge, 4.0, "a ChargeN")
}
