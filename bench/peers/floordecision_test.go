package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
)

// The floors that answer a Decision answer as Limiter.Allow on the memory
// store under GCRA: the same admissions, counts and limits, and times on
// their own clocks that agree with the Limiter's to within the time the
// calls took (a reset time rests on when the calls before it were made).
// A floor that answered less would bound nothing.
func TestTheDecisionFloorsAnswerAsTheLimiter(t *testing.T) {
	for _, p := range []struct {
		limit  int
		window time.Duration
	}{{5, time.Hour}, {3, 90 * time.Millisecond}, {7, 24 * time.Hour}} {
		store, err := memory.New()
		require.NoError(t, err)
		defer store.Close()
		l, err := ratelimit.New(store, ratelimit.NewPolicy(ratelimit.GCRA, p.limit, p.window))
		require.NoError(t, err)
		decision := newDecisionGCRA(p.limit, p.window)
		rule, err := backend.NewRule(backend.GCRA, int64(p.limit), p.window, int64(p.limit), p.window, "floor:")
		require.NoError(t, err)
		duties := &dutiesFront{rule: rule, store: newDutiesStore(rule, 1000)}
		floors := map[string]func(key string, d *ratelimit.Decision){
			"with a Decision": decision.decide,
			"with the duties": func(key string, d *ratelimit.Decision) {
				require.NoError(t, duties.allowTo(context.Background(), key, 1, d))
			},
		}
		began := time.Now()
		for i := range p.limit + 3 {
			want, err := l.Allow(context.Background(), "k")
			require.NoError(t, err)
			for name, decide := range floors {
				var got ratelimit.Decision
				decide("k", &got)
				spread := time.Since(began) + 2*time.Microsecond // and a µs of rounding each
				msg := []any{"%s, %d per %v, call %d: %+v against %+v", name, p.limit, p.window, i, got, want}
				require.Equal(t, want.Allowed, got.Allowed, msg...)
				require.Equal(t, want.Limit, got.Limit, msg...)
				require.Equal(t, want.Count, got.Count, msg...)
				require.Equal(t, want.Remaining, got.Remaining, msg...)
				require.Equal(t, want.Source, got.Source, msg...)
				require.WithinDuration(t, want.At, got.At, spread, msg...)
				require.WithinDuration(t, want.ResetAt, got.ResetAt, spread, msg...)
				require.InDelta(t, want.RetryAfter, got.RetryAfter, float64(spread), msg...)
			}
		}
	}
}

// The duties floor checks its arguments and keeps its bound on keys, as a
// store must: a bad request changes nothing, and a shard full of keys
// drops one for a new key.
func TestTheDutiesFloorKeepsItsDuties(t *testing.T) {
	rule, err := backend.NewRule(backend.GCRA, 2, time.Hour, 2, time.Hour, "floor:")
	require.NoError(t, err)
	s := newDutiesStore(rule, 64) // one key a shard
	f := &dutiesFront{rule: rule, store: s}
	var d ratelimit.Decision
	ctx := context.Background()
	require.ErrorIs(t, f.allowTo(ctx, "", 1, &d), errFloorArgs)
	require.ErrorIs(t, f.allowTo(ctx, "k", 3, &d), errFloorArgs)
	_, err = s.Take(ctx, backend.Request{Rule: rule, Key: "k", Cost: 1, Now: 5})
	require.ErrorIs(t, err, errFloorArgs)
	held := 0
	for i := range s.shards {
		held += len(s.shards[i].states)
	}
	require.Zero(t, held, "a bad request holds no key")
	for i := range 1000 {
		require.NoError(t, f.allowTo(ctx, "key-"+string(rune('a'+i%26))+string(rune('a'+i/26)), 1, &d))
	}
	for i := range s.shards {
		require.LessOrEqual(t, len(s.shards[i].states), 1)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, f.allowTo(canceled, "k", 1, &d), context.Canceled)
}
