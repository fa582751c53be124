package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/rediscore"
	"github.com/ratelimit-go/ratelimit/servertest/serverinfo"
)

// estimatedClock: on the store's clock, a fixed window, a counter and GCRA
// decide at the server's time as the store estimates it from its own
// readings of TIME (rediscore's clock.go), not by a TIME in every script. A
// Decision's At lies within the estimate's bound of the server's TIME read
// just before and just after it, and once the store has an estimate, a
// batch of decisions costs the server a TIME or two (the store's readings),
// not one each, alone or several in one script (a Multi). The sliding
// log's script still reads TIME on every call.
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
	for _, alg := range []backend.Algorithm{backend.FixedWindow, backend.SlidingWindowCounter, backend.GCRA} {
		l := Limiter(t, newStore(t, addr), ratelimit.NewPolicy(alg, 1_000_000, time.Hour), Prefix())
		estimated(alg.String(), func() (time.Time, error) {
			d, err := l.Allow(ctx, "user")
			return d.At, err
		})
	}
	// TakeAll of several (a Multi on one store): one script, which reads
	// TIME only for a sliding log among them.
	store := newStore(t, addr)
	pre := Prefix()
	fixed := Limiter(t, store, ratelimit.NewPolicy(backend.FixedWindow, 1_000_000, time.Hour), pre+"f:")
	gcra := Limiter(t, store, ratelimit.NewPolicy(backend.GCRA, 1_000_000, time.Hour), pre+"g:")
	sliding := Limiter(t, store, ratelimit.NewPolicy(backend.SlidingWindow, 1000, time.Hour), pre+"s:")
	estimated("a Multi of a fixed window and GCRA", multi(fixed, gcra))
	for _, decide := range []func() (time.Time, error){multi(sliding), multi(fixed, sliding)} {
		require.GreaterOrEqual(t, spent(decide, 20), int64(20), "the sliding log's script reads TIME on every call")
	}
	// A store whose decisions all read TIME in their scripts (a Multi of
	// sliding logs) reads no clock of its own: exactly one TIME a call.
	logs := newStore(t, addr)
	pre = Prefix()
	twoLogs := multi(Limiter(t, logs, ratelimit.NewPolicy(backend.SlidingWindow, 1000, time.Hour), pre+"a:"),
		Limiter(t, logs, ratelimit.NewPolicy(backend.SlidingWindow, 1000, time.Hour), pre+"b:"))
	require.Equal(t, int64(20), spent(twoLogs, 20), "a Multi of sliding logs: one TIME a call, in its script, and no reading")
}
