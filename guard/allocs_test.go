package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/guard"
)

// A TakeAll through a closed breaker allocates nothing of the guard's
// own: the memory store's TakeAll allocates nothing, and the guard around
// it added three allocations a call (its breakers' list, their probes, and
// an error target errors.As made escape though the call had not failed),
// 0.7 µs of ratelimitd's CPU a request of three descriptors.
func TestAGuardedTakeAllAllocatesNothingOfItsOwn(t *testing.T) {
	ctx := context.Background()
	plain := newMemory(t)
	s, err := guard.New(newMemory(t), guard.WithFallback(newMemory(t), 2))
	require.NoError(t, err)
	rule, err := backend.NewRule(backend.FixedWindow, 1_000_000, time.Hour, 0, time.Hour, "a:")
	require.NoError(t, err)
	reqs := []backend.Request{{Rule: rule, Key: "x", Cost: 1}, {Rule: rule, Key: "y", Cost: 1}, {Rule: rule, Key: "z", Cost: 1}}
	outs := make([]backend.Outcome, len(reqs))
	for _, st := range []backend.Store{plain, s} {
		require.NoError(t, st.TakeAll(ctx, reqs, outs)) // the keys exist
	}
	base := testing.AllocsPerRun(1_000, func() { _ = plain.TakeAll(ctx, reqs, outs) })
	guarded := testing.AllocsPerRun(1_000, func() { _ = s.TakeAll(ctx, reqs, outs) })
	require.Equal(t, base, guarded, "allocations a TakeAll: the store's %v, through the guard %v", base, guarded)
}
