package storetest

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/rediscore"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
	"github.com/ratelimit-go/ratelimit/servertest/serverinfo"
)

// estimatedClock: on the store's clock, every algorithm decides at the
// server's time as the store estimates it from its own readings of TIME
// (rediscore's clock.go), not by a TIME in every script. A Decision's At
// lies within the estimate's bound of the server's TIME read just before
// and just after it, and once the store has an estimate, a batch of
// decisions costs the server a TIME or two (the store's readings), not one
// each, alone or several in one script (a Multi). Permits still read TIME
// in their script on every call, and a store that only acquires them
// takes no readings of its own.
func estimatedClock(t *testing.T, addr string, newStore NewStore) {
	ctx := context.Background()
	admin := Admin(t, addr)
	times := func() int64 {
		calls, err := serverinfo.CommandCalls(ctx, admin)
		require.NoError(t, err)
		return calls["time"]
	}
	// The clocks' drift between a reading and its use, under a second:
	// NTP holds it under 0.5 ms; a millisecond of room.
	bound := (rediscore.EstimateError + time.Millisecond).Microseconds()
	// spent is the TIMEs n calls of decide cost the server.
	spent := func(decide func() (time.Time, error), n int) int64 {
		before := times()
		for i := 0; i < n; i++ {
			_, err := decide()
			require.NoError(t, err)
		}
		return times() - before
	}
	// estimated requires decide to cost a batch of decisions a TIME or two
	// once the store has an estimate, and to decide within its bound of
	// the server's TIME read around it.
	estimated := func(what string, decide func() (time.Time, error)) {
		const batch = 50
		var n int64
		// A busy machine may answer a reading too slowly to be used: the
		// scripts then read TIME, and a later batch finds the estimate.
		for try := 0; try < 100; try++ {
			if n = spent(decide, batch); n <= 2 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		require.LessOrEqual(t, n, int64(2), "%s: %d decisions, %d TIMEs: the store's estimate spares the scripts their TIME", what, batch, n)
		for i := 0; i < 20; i++ {
			before, err := admin.Time(ctx).Result()
			require.NoError(t, err)
			at, err := decide()
			require.NoError(t, err)
			after, err := admin.Time(ctx).Result()
			require.NoError(t, err)
			require.GreaterOrEqual(t, at.UnixMicro(), before.UnixMicro()-bound, "%s: decided at the server's time, as estimated", what)
			require.LessOrEqual(t, at.UnixMicro(), after.UnixMicro()+bound, "%s: decided at the server's time, as estimated", what)
		}
	}
	multi := func(ls ...*ratelimit.Limiter) func() (time.Time, error) {
		m, err := ratelimit.NewMulti(ls...)
		require.NoError(t, err)
		keys := make([]string, len(ls))
		for i := range keys {
			keys[i] = "user"
		}
		return func() (time.Time, error) {
			d, err := m.Allow(ctx, keys...)
			return d.At, err
		}
	}
	// A store that only acquires permits, whose script reads TIME, reads no
	// clock of its own: exactly one TIME a call. Checked first, before this
	// test's stores that estimate have begun readings; a batch with more is
	// taken again a reading's interval (rediscore's readEvery, 1 s) later,
	// when a store of permits that read the clock would read it again,
	// while a stray reading of another test's store would not recur.
	permits := Limiter(t, newStore(t, addr), ratelimit.Concurrency(100, time.Hour), Prefix())
	var held []*ratelimit.Permit
	acquire := func() (time.Time, error) {
		p, d, err := permits.Acquire(ctx, "user")
		held = append(held, p)
		return d.At, err
	}
	n := spent(acquire, 20)
	for try := 0; try < 3 && n != 20; try++ {
		time.Sleep(1100 * time.Millisecond)
		n = spent(acquire, 20)
	}
	require.Equal(t, int64(20), n, "permits: one TIME a call, in their script, and no reading")
	for _, p := range held {
		require.NoError(t, p.Release(ctx))
	}
	// Sliding logs of both forms: a short one (a string) and a sorted set.
	policies := []ratelimit.Policy{ratelimit.NewPolicy(backend.FixedWindow, 1_000_000, time.Hour),
		ratelimit.NewPolicy(backend.SlidingWindowCounter, 1_000_000, time.Hour), ratelimit.NewPolicy(backend.GCRA, 1_000_000, time.Hour),
		ratelimit.NewPolicy(backend.SlidingWindow, 1000, time.Hour), ratelimit.NewPolicy(backend.SlidingWindow, 10, time.Millisecond)}
	for _, p := range policies {
		l := Limiter(t, newStore(t, addr), p, Prefix())
		estimated(p.String(), func() (time.Time, error) {
			d, err := l.Allow(ctx, "user")
			return d.At, err
		})
	}
	// TakeAll of several (a Multi on one store): one script, one estimate.
	store := newStore(t, addr)
	pre := Prefix()
	fixed := Limiter(t, store, ratelimit.NewPolicy(backend.FixedWindow, 1_000_000, time.Hour), pre+"f:")
	gcra := Limiter(t, store, ratelimit.NewPolicy(backend.GCRA, 1_000_000, time.Hour), pre+"g:")
	sliding := Limiter(t, store, ratelimit.NewPolicy(backend.SlidingWindow, 1000, time.Hour), pre+"s:")
	estimated("a Multi of a fixed window and GCRA", multi(fixed, gcra))
	estimated("a Multi of a fixed window and a sliding log", multi(fixed, sliding))
	estimatedExpiry(t, admin)
}

// estimatedExpiry: a sliding log decided at an estimate of the server's
// time (a negative now: lua.Estimated) dates its keys' expiry by it, less
// lua.EstimateMargin, and renews them once they would not outlive the
// window by that margin, so that an estimate off by its bound never lets
// the keys expire while an entry counts. The times are the test's own: a
// script reads no clock of the machine's when given one.
func estimatedExpiry(t *testing.T, admin *goredis.Client) {
	ctx := context.Background()
	const window, slack = 20 * time.Millisecond, backend.KeepSlack
	rule, err := backend.NewRule(backend.SlidingWindow, 1000, window, 0, time.Hour, Prefix())
	require.NoError(t, err)
	keys := lua.Keys(backend.Request{Rule: rule, Key: "k", Cost: 1})
	t0 := time.Now().UnixMilli() * 1000
	// e is the meta's expiry (ms) after a take at t0 + ms.
	e := func(ms int64) int64 {
		t.Helper()
		req := backend.Request{Rule: rule, Key: "k", Cost: 1, Now: lua.Estimated(t0 + ms*1000)}
		o, err := evalScript(ctx, admin, req, lua.Take)
		require.NoError(t, err)
		require.Equal(t, t0+ms*1000, o.At, "decided at the estimate")
		require.True(t, o.Allowed())
		meta, err := admin.Get(ctx, keys[1]).Bytes()
		require.NoError(t, err)
		require.Len(t, meta, 48)
		return int64(math.Float64frombits(binary.LittleEndian.Uint64(meta[32:])))
	}
	ttl := (time.Hour + slack).Milliseconds() // the retention's, and the slack
	margin := lua.EstimateMargin.Milliseconds()
	first := t0/1000 + ttl - margin
	require.Equal(t, first, e(0), "the keys' expiry, the margin taken off")
	// Kept while they outlive the retention by the margin: at ms after t0
	// they have ttl - margin - ms left, and need ttl - slack + margin.
	keep := slack.Milliseconds() - 2*margin
	require.Equal(t, first, e(keep), "kept: the TTL still outlives the retention by the margin")
	require.Equal(t, t0/1000+keep+1+ttl-margin, e(keep+1), "renewed: it would not outlive it by the margin")
}
