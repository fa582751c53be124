package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/internal/keyhash"
)

// The floors that answer a Decision answer as Limiter.Allow on the memory
// store, under GCRA and a sliding log: the same admissions, counts and
// limits, and times on their own clocks that agree with the Limiter's to
// within the time the calls took (a reset time rests on when the calls
// before it were made).
// A floor that answered less would bound nothing.
func TestTheDecisionFloorsAnswerAsTheLimiter(t *testing.T) {
	for _, p := range []struct {
		limit  int
		window time.Duration
	}{{5, time.Hour}, {3, 10 * time.Minute}, {7, 24 * time.Hour}} { // nothing drains between two calls
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
		check(t, l, floors, p.limit)
		logs, err := ratelimit.New(store, ratelimit.NewPolicy(ratelimit.SlidingWindow, p.limit, p.window), ratelimit.WithPrefix("logs:"))
		require.NoError(t, err)
		check(t, logs, map[string]func(string, *ratelimit.Decision){"a sliding log": newLogFloor(p.limit, p.window).decide}, p.limit)
	}
}

// check calls l and each floor in turn on one key, limit+3 times, and
// checks that they answer alike.
func check(t *testing.T, l *ratelimit.Limiter, floors map[string]func(key string, d *ratelimit.Decision), limit int) {
	t.Helper()
	began := time.Now()
	for i := range limit + 3 {
		want, err := l.Allow(context.Background(), "k")
		require.NoError(t, err)
		for name, decide := range floors {
			var got ratelimit.Decision
			decide("k", &got)
			spread := time.Since(began) + 2*time.Microsecond // and a µs of rounding each
			msg := []any{"%s, %v, call %d: %+v against %+v", name, l.Policy(), i, got, want}
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

// A key whose hash another key holds has a state of its own: the duties
// floor files states under the key's hash alone, as the store's index does,
// and compares the key.
func TestTheDutiesFloorKeepsCollidingKeysApart(t *testing.T) {
	rule, err := backend.NewRule(backend.GCRA, 2, time.Hour, 2, time.Hour, "floor:")
	require.NoError(t, err)
	s := newDutiesStore(rule, 1000)
	f := &dutiesFront{rule: rule, store: s}
	h := keyhash.String(s.seed, "k")
	other := &dutiesState{key: "other", unit: s.unit, drain: s.drain}
	s.shards[h%64].states[h] = other // "other" under k's hash, as if they collided
	ctx := context.Background()
	for i := range 3 {
		var d ratelimit.Decision
		require.NoError(t, f.allowTo(ctx, "k", 1, &d))
		require.Equal(t, i < 2, d.Allowed, "call %d", i)
		require.Equal(t, min(i+1, 2), d.Count, "call %d", i)
	}
	require.Zero(t, other.level, "the other key's state is untouched")
	require.Same(t, other, s.shards[h%64].states[h])
}
