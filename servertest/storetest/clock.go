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
	const batch = 50
	for _, alg := range []backend.Algorithm{backend.FixedWindow, backend.SlidingWindowCounter, backend.GCRA} {
		l := Limiter(t, newStore(t, addr), ratelimit.NewPolicy(alg, 1_000_000, time.Hour), Prefix())
		var spent int64 // TIMEs in the last batch
		// A busy machine may answer a reading too slowly to be used: the
		// scripts then read TIME, and a later batch finds the estimate.
		for try := 0; try < 100; try++ {
			before := times()
			for i := 0; i < batch; i++ {
				_, err := l.Allow(ctx, "user")
				require.NoError(t, err)
			}
			if spent = times() - before; spent <= 2 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		require.LessOrEqual(t, spent, int64(2), "%v: %d decisions, %d TIMEs: the store's estimate spares the scripts their TIME", alg, batch, spent)
		for i := 0; i < 20; i++ {
			before, err := admin.Time(ctx).Result()
			require.NoError(t, err)
			d, err := l.Allow(ctx, "user")
			require.NoError(t, err)
			after, err := admin.Time(ctx).Result()
			require.NoError(t, err)
			require.GreaterOrEqual(t, d.At.UnixMicro(), before.UnixMicro()-bound, "%v: decided at the server's time, as estimated", alg)
			require.LessOrEqual(t, d.At.UnixMicro(), after.UnixMicro()+bound, "%v: decided at the server's time, as estimated", alg)
		}
	}
	// TakeAll of several (a Multi on one store): one script, which reads
	// TIME only for a sliding log among them.
	store := newStore(t, addr)
	pre := Prefix()
	fixed := Limiter(t, store, ratelimit.NewPolicy(backend.FixedWindow, 1_000_000, time.Hour), pre+"f:")
	gcra := Limiter(t, store, ratelimit.NewPolicy(backend.GCRA, 1_000_000, time.Hour), pre+"g:")
	sliding := Limiter(t, store, ratelimit.NewPolicy(backend.SlidingWindow, 1000, time.Hour), pre+"s:")
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
	o1, withLog := multi(fixed, gcra), multi(fixed, sliding)
	var spent int64
	for try := 0; try < 100; try++ {
		before := times()
		for i := 0; i < batch; i++ {
			_, err := o1()
			require.NoError(t, err)
		}
		if spent = times() - before; spent <= 2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.LessOrEqual(t, spent, int64(2), "a Multi of a fixed window and GCRA: %d decisions, %d TIMEs", batch, spent)
	for _, decide := range []func() (time.Time, error){o1, withLog} {
		before, err := admin.Time(ctx).Result()
		require.NoError(t, err)
		at, err := decide()
		require.NoError(t, err)
		after, err := admin.Time(ctx).Result()
		require.NoError(t, err)
		require.GreaterOrEqual(t, at.UnixMicro(), before.UnixMicro()-bound)
		require.LessOrEqual(t, at.UnixMicro(), after.UnixMicro()+bound)
	}
	for _, decide := range []func() (time.Time, error){multi(sliding), withLog} {
		before := times()
		for i := 0; i < 20; i++ {
			_, err := decide()
			require.NoError(t, err)
		}
		require.GreaterOrEqual(t, times()-before, int64(20), "the sliding log's script reads TIME on every call")
	}
	// A store whose decisions all read TIME in their scripts (a Multi of
	// sliding logs) reads no clock of its own: exactly one TIME a call.
	logs := newStore(t, addr)
	pre = Prefix()
	twoLogs := multi(Limiter(t, logs, ratelimit.NewPolicy(backend.SlidingWindow, 1000, time.Hour), pre+"a:"),
		Limiter(t, logs, ratelimit.NewPolicy(backend.SlidingWindow, 1000, time.Hour), pre+"b:"))
	before := times()
	for i := 0; i < 20; i++ {
		_, err := twoLogs()
		require.NoError(t, err)
	}
	require.Equal(t, int64(20), times()-before, "a Multi of sliding logs: one TIME a call, in its script, and no reading")
}
