package rlqs

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// step is the reporting interval of these simulations, and ttl the
// assignments' (1.5 intervals, so one missed answer does not expire one).
const (
	step = time.Second
	ttl  = 3 * step / 2
	// hold is how long a grant counts: its TTL and half again.
	hold = ttl + ttl/2
)

// Twenty planes whose demands (summing to about five times the limit,
// skewed) shift every ten intervals, reporting and assigned every
// interval: what they may enforce never sums past the limit, at each
// assignment and between; and 2 intervals after each shift (a TTL and an
// assignment) every grant is its fair share.
func TestTheHoldsNeverPassTheLimitAndConverge(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const limit, planes = 1000, 20
	a := NewAllocator(limit, ttl)
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	demands := make([]int64, planes)
	for shift := range 30 {
		for i := range demands {
			demands[i] = int64(rng.ExpFloat64() * 250) // skewed: most small, a few large
		}
		if shift%5 == 4 {
			demands[rng.IntN(planes)] = 4000 // a hot plane
		}
		for s := range 10 {
			var grants map[string]int64
			for i, d := range demands {
				a.Report(id(i), d, now)
			}
			grants = a.Assign(now)
			require.LessOrEqual(t, a.Held(now), int64(limit), "shift %d, interval %d", shift, s)
			require.LessOrEqual(t, a.Held(now.Add(step/2)), int64(limit), "between assignments")
			if s >= 2 {
				fair := FairShares(limit, demands) // id(i) sorts as i: Assign's order
				for i := range demands {
					require.Equal(t, fair[i], grants[id(i)], "shift %d, interval %d, plane %d: converged", shift, s, i)
				}
			}
			now = now.Add(step)
		}
	}
}

// A plane that stops reporting (its instance killed) is assigned for two
// TTLs more, and keeps its hold until its last grant's TTL ends; its share
// then goes to the others. One whose stream ended (Forget) is assigned no
// more at once.
func TestASilentPlanesShareGoesToTheOthersAfterItsTTL(t *testing.T) {
	for _, ended := range []bool{false, true} {
		a := NewAllocator(900, ttl)
		start := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
		for _, p := range []string{"a", "b", "c"} {
			a.Report(p, 1000, start)
		}
		require.Equal(t, map[string]int64{"a": 300, "b": 300, "c": 300}, a.Assign(start))
		if ended {
			a.Forget("c")
		}
		var lastGrant time.Time // c's
		for s := 1; s <= 5; s++ {
			now := start.Add(time.Duration(s) * step)
			a.Report("a", 1000, now)
			a.Report("b", 1000, now)
			grants := a.Assign(now)
			require.LessOrEqual(t, a.Held(now), int64(900), "interval %d", s)
			switch _, assigned := grants["c"]; {
			case assigned:
				require.False(t, ended, "interval %d: no grant after Forget", s)
				require.Less(t, now.Sub(start), 2*ttl, "interval %d: assigned while it reported within two TTLs", s)
				lastGrant = now
				require.Equal(t, map[string]int64{"a": 300, "b": 300, "c": 300}, grants, "interval %d", s)
			case now.Before(lastGrant.Add(hold)) || (lastGrant.IsZero() && now.Before(start.Add(hold))):
				require.Equal(t, map[string]int64{"a": 300, "b": 300}, grants, "interval %d: c's hold stands", s)
			default:
				require.Equal(t, map[string]int64{"a": 450, "b": 450}, grants, "interval %d: c's share freed", s)
			}
		}
		require.Nil(t, a.planes["c"], "c forgotten")
	}
}

// A plane that asks less than its fair share gets what it asks, and the
// rest goes to the others, as soon as the holds allow.
func TestAPlaneAskingLittleGetsItsAsk(t *testing.T) {
	a := NewAllocator(1000, ttl)
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	var grants map[string]int64
	for range 3 {
		a.Report("small", 50, now)
		a.Report("big", 5000, now)
		grants = a.Assign(now)
		now = now.Add(step)
	}
	require.Equal(t, map[string]int64{"small": 50, "big": 950}, grants)
}

func id(i int) string { return fmt.Sprintf("plane-%02d", i) }

// Reports, assignments and stream ends at random moments (planes that
// die, come back, report late): the holds never sum past the limit, at
// any moment probed.
func TestTheHoldsNeverPassTheLimitWhateverTheTiming(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const limit = 777
	a := NewAllocator(limit, ttl)
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	for range 100_000 {
		now = now.Add(time.Duration(rng.Int64N(int64(step / 3))))
		p := id(rng.IntN(12))
		switch r := rng.IntN(10); {
		case r < 6:
			a.Report(p, rng.Int64N(2000), now)
		case r < 9:
			a.Assign(now)
		default:
			a.Forget(p)
		}
		require.LessOrEqual(t, a.Held(now), int64(limit))
		require.LessOrEqual(t, a.Held(now.Add(time.Duration(rng.Int64N(int64(2*ttl))))), int64(limit))
	}
}

// A limit reloaded lower, or in another window, keeps the holds: what the
// planes may enforce comes under the new limit as the older grants end,
// and no raise goes past it meanwhile.
func TestAReloadedLimitKeepsTheHolds(t *testing.T) {
	a := NewAllocator(1000, ttl)
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	for _, p := range []string{"a", "b"} {
		a.Report(p, 5000, now)
	}
	require.Equal(t, map[string]int64{"a": 500, "b": 500}, a.Assign(now))
	a.Rescale(60_000, 60) // 1,000 a second reloaded as 60,000 a minute: the same rate
	require.Equal(t, int64(60_000), a.Held(now), "the holds, in the minute's units")
	now = now.Add(step)
	a.Report("a", 300_000, now)
	a.Report("b", 300_000, now)
	require.Equal(t, map[string]int64{"a": 30_000, "b": 30_000}, a.Assign(now))
	a.SetLimit(20_000) // lowered
	now = now.Add(step)
	a.Report("a", 300_000, now)
	a.Report("b", 300_000, now)
	require.Equal(t, map[string]int64{"a": 10_000, "b": 10_000}, a.Assign(now), "lowered at once")
	require.Equal(t, int64(60_000), a.Held(now), "what they may still enforce, until the older grants end")
	require.Equal(t, int64(20_000), a.Held(now.Add(hold-step+time.Millisecond)), "then the new limit, once the grants of the interval before end")
}

// A lowered grant's old one stops counting at the plane's second report
// after the lowered one was sent (one report may cross the answer, not
// two), however long its TTL: the raise it makes room for follows then.
func TestALoweredGrantsOldHoldEndsAtTheSecondReportAfter(t *testing.T) {
	a := NewAllocator(1000, time.Hour) // no TTL ends here
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	ask := func(p string) int64 {
		a.Report(p, 5000, now)
		return a.Assign(now, p)[p]
	}
	require.EqualValues(t, 1000, ask("a"), "alone")
	require.EqualValues(t, 0, ask("b"), "a may enforce all of it")
	require.EqualValues(t, 500, ask("a"), "lowered")
	require.EqualValues(t, 0, ask("b"), "a may not have it yet")
	require.EqualValues(t, 500, ask("a"), "a's next report may have crossed the answer")
	require.EqualValues(t, 0, ask("b"))
	require.EqualValues(t, 500, ask("a"), "a's second report after: it has the lowered grant")
	require.EqualValues(t, 500, ask("b"), "raised")
	require.EqualValues(t, 1000, a.Held(now))
}
