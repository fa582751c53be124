package algorithm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const ms = int64(1000) // µs

// rateOf is p in the algorithms' units.
func rateOf(p policy) Rate {
	burst := int64(0)
	if p.Algorithm == gcra {
		burst = int64(p.Burst)
	}
	return NewRate(int64(p.Limit), p.Window.Microseconds(), burst)
}

// step is one call and the outcome it must have; times in ms.
type step struct {
	name                      string
	at, cost                  int64 // cost 0: a peek of cost 1
	allowed                   bool
	count, resetAt, retryAftr int64
	decided                   int64 // the time decided at, when not at (the key's time)
}

// taker is what every state does.
type taker interface {
	Take(now int64, r Rate, n int64) (Outcome, Effect)
}

// take is st.Take's outcome.
func take(st taker, now int64, r Rate, n int64) Outcome {
	out, _ := st.Take(now, r, n)
	return out
}

type decider interface {
	Take(now int64, r Rate, n int64) (Outcome, Effect)
	Peek(now int64, r Rate, n int64) Outcome
	Life(now int64, r Rate) int64
}

func run(t *testing.T, d decider, r Rate, steps []step) {
	t.Helper()
	for _, s := range steps {
		var out Outcome
		var e Effect
		if s.cost == 0 {
			out = d.Peek(s.at*ms, r, 1)
		} else {
			out, e = d.Take(s.at*ms, r, s.cost)
		}
		at := s.at
		if s.decided != 0 {
			at = s.decided
		}
		if s.cost != 0 && out.admitted() { // a write says how long the state counts
			assert.Equal(t, d.Life(at*ms, r), e.Life, "%s: Life", s.name)
			assert.Positive(t, e.Life, "%s: Life", s.name)
			assert.True(t, e.Changed, "%s: an admission changes the state", s.name)
			e.Life = 0
		}
		// TestChangedIsWhetherTheSavedBytesChanged checks Changed.
		assert.Zero(t, e.Life, "%s: a peek or a denial writes no Life", s.name)
		want := Outcome{Count: s.count, ResetAt: s.resetAt * ms, RetryAfter: s.retryAftr * ms, At: at * ms}
		assert.Equal(t, want, out, s.name)
		assert.Equal(t, s.allowed, out.admitted(), "%s: Allowed", s.name)
	}
}

func rate(limit int, window time.Duration, alg kind, burst int) Rate {
	return rateOf(policy{Limit: limit, Window: window, Algorithm: alg, Burst: burst})
}

func TestLogFollowsTheRules(t *testing.T) {
	run(t, &Log{}, rate(3, 100*time.Millisecond, slidingWindow, 0), []step{
		{"peek on an empty log", 0, 0, true, 0, 0, 0, 0},
		{"first request", 0, 1, true, 1, 100, 0, 0},
		{"two at once: one entry of cost 2", 10, 2, true, 3, 100, 0, 0},
		{"over the limit: waits for the oldest to leave", 50, 1, false, 3, 100, 50, 0},
		{"cost 2 waits for the entry holding the second unit", 60, 2, false, 3, 100, 50, 0},
		{"the oldest left exactly at its time+window", 100, 1, true, 3, 110, 0, 0},
		{"peek denied", 105, 0, false, 3, 110, 5, 0},
		{"both units of t=10 leave together", 110, 2, true, 3, 200, 0, 0},
		{"a whole window later everything has left", 300, 0, true, 0, 300, 0, 0},
	})
}

// A cost is one entry: a huge cost under a huge limit is one entry, not
// millions.
func TestLogHoldsAnEntryPerRequest(t *testing.T) {
	var l Log
	r := rate(maxLogLimit, time.Hour, slidingWindow, 0)
	require.True(t, take(&l, 0, r, maxLogLimit-1).admitted())
	require.True(t, take(&l, 1, r, 1).admitted())
	require.False(t, take(&l, 2, r, 1).admitted())
	assert.Equal(t, 2, l.Len())
}

// A clock that steps back leaves the entries written ahead of it in the
// future: they are brought back to now, so they leave one window later at
// most, not one window after the time they claim.
func TestLogRetimesTheFuture(t *testing.T) {
	var l Log
	r := rate(2, time.Second, slidingWindow, 0)
	hour := int64(time.Hour / time.Microsecond)
	take(&l, hour, r, 2)
	out := l.Peek(0, r, 1)
	assert.Equal(t, Outcome{Count: 2, ResetAt: 1000 * ms, RetryAfter: 1000 * ms, At: 0}, out, "a peek sees them at now")
	out = take(&l, 5*ms, r, 1)
	assert.Equal(t, int64(1000*ms), out.RetryAfter, "a take brings them to now...")
	out = take(&l, 1005*ms, r, 1)
	assert.True(t, out.admitted(), "... so they leave one window later")
}

func TestFixedFollowsTheRules(t *testing.T) {
	run(t, &Fixed{}, rate(3, 100*time.Millisecond, fixedWindow, 0), []step{
		{"peek before any window", 5, 0, true, 0, 100, 0, 0},
		{"first", 5, 2, true, 2, 100, 0, 0},
		{"fills the window", 99, 1, true, 3, 100, 0, 0},
		{"denied until the window ends", 99, 1, false, 3, 100, 1, 0},
		{"a new window at the boundary", 100, 3, true, 3, 200, 0, 0},
		{"a late request, behind the key by under MaxSkew, is decided at its time, in its window", 50, 1, false, 3, 200, 100, 100},
		{"skipping windows", 30_730, 1, true, 1, 30_800, 0, 0},
		{"stepped back by more than MaxSkew: the window of 30,700 moves to now's, count and all", 410, 2, true, 3, 500, 0, 0},
		{"and ends with now's window", 499, 1, false, 3, 500, 1, 0},
		{"then counting starts over", 500, 1, true, 1, 600, 0, 0},
	})
}

func TestSlidingCounterFollowsTheRules(t *testing.T) {
	// 10 per 100ms. Counts are the previous window's weighed by the
	// thousandths of it still covered, rounded down, plus the current.
	run(t, &SlidingCounter{}, rate(10, 100*time.Millisecond, slidingWindowCounter, 0), []step{
		{"peek before any window", 5, 0, true, 0, 5, 0, 0},
		{"first: evenly spread, the first of 4 slides out 25ms into the next window", 5, 4, true, 4, 125, 0, 0},
		{"fills the window", 90, 6, true, 10, 110, 0, 0},
		{"denied: the count drops when 1 of 10 has slid out, at 110", 95, 1, false, 10, 110, 15, 0},
		{"at 110, 900 thousandths of 10 = 9 remain", 110, 1, true, 10, 120, 0, 0},
		{"cost 3 fits once ceil(10*k/1000) <= 10-1-3: k <= 600, at e=40", 115, 3, false, 10, 120, 25, 0},
		{"at 131, k=690 weighs 7", 131, 3, false, 8, 140, 9, 0},
		{"at 140, k=600 weighs 6", 140, 3, true, 10, 150, 0, 0},
		{"two windows later both counts are gone", 300, 0, true, 0, 300, 0, 0},
		{"a count to carry into the next window", 350, 10, true, 10, 410, 0, 0},
		{"in the next window it still weighs 10 at e=0", 400, 1, false, 10, 410, 10, 0},
	})
}

// fitsAfter is the exact inverse of the weighing: checked against a scan.
func TestFitsAfterIsTheFirstFit(t *testing.T) {
	for _, w := range []int64{1000, 1001, 7919, 100_000} {
		for p := int64(0); p <= 30; p++ {
			for m := int64(0); m <= 30; m++ {
				first := w + 1
				for e := int64(0); e <= w; e++ {
					if weighted(p, covered(e, w)) <= m {
						first = e
						break
					}
				}
				require.Equal(t, first, fitsAfter(p, m, w), "p=%d m=%d w=%d", p, m, w)
			}
		}
	}
}

func TestBucketFollowsTheRules(t *testing.T) {
	// 10 per second (one every 100ms), burst 3.
	run(t, &Bucket{}, rate(10, time.Second, gcra, 3), []step{
		{"peek at an empty bucket", 0, 0, true, 0, 0, 0, 0},
		{"a burst of 3 at once", 0, 3, true, 3, 100, 0, 0},
		{"full: the next fits after one interval", 0, 1, false, 3, 100, 100, 0},
		{"40ms later, 60ms to go", 40, 1, false, 3, 100, 60, 0},
		{"cost 2 waits two intervals from full", 40, 2, false, 3, 100, 160, 0},
		{"spaced: one every 100ms", 100, 1, true, 3, 200, 0, 0},
		{"a long pause empties the bucket", 1000, 0, true, 0, 1000, 0, 0},
	})
}

// A rate that is no whole number of microseconds per request (3 per second:
// 333333.3µs) is computed exactly: three requests take exactly one second.
func TestBucketIsExactForFractionalIntervals(t *testing.T) {
	var b Bucket
	r := rate(3, time.Second, gcra, 3)
	require.True(t, take(&b, 0, r, 3).admitted())
	out := take(&b, 0, r, 3)
	assert.Equal(t, int64(1000*ms), out.RetryAfter)
	assert.False(t, take(&b, 1000*ms-1, r, 3).admitted())
	assert.True(t, take(&b, 1000*ms, r, 3).admitted())
}

func TestBucketFromTheFutureDrainsFromNow(t *testing.T) {
	var b Bucket
	r := rate(1, time.Second, gcra, 2)
	hour := int64(time.Hour / time.Microsecond)
	take(&b, hour, r, 2)
	out := take(&b, 0, r, 1)
	require.False(t, out.admitted())
	assert.Equal(t, int64(1000*ms), out.RetryAfter, "one interval from now, not from an hour ahead")
	assert.True(t, take(&b, 1000*ms, r, 1).admitted())
}

func TestRefunds(t *testing.T) {
	type refunder interface {
		decider
		Refund(now int64, r Rate, n int64) (Outcome, Effect, bool)
	}
	for _, alg := range kinds() {
		t.Run(alg.String(), func(t *testing.T) {
			states := map[kind]refunder{slidingWindow: &Log{}, fixedWindow: &Fixed{},
				slidingWindowCounter: &SlidingCounter{}, gcra: &Bucket{}}
			s, r := states[alg], rate(5, time.Second, alg, 5)
			require.True(t, take(s, 0, r, 2).admitted())
			require.True(t, take(s, 0, r, 3).admitted())
			_, _, ok := s.Refund(0, r, 6)
			require.False(t, ok, "more than was taken")
			require.Equal(t, int64(5), s.Peek(0, r, 1).Count, "a refused refund changes nothing")
			out, _, ok := s.Refund(0, r, 4)
			require.True(t, ok)
			require.Equal(t, int64(1), out.Count)
			require.True(t, take(s, 0, r, 4).admitted(), "the refund is quota again")
			require.False(t, take(s, 0, r, 1).admitted())
		})
	}
}

func TestWindowStartBeforeTheEpoch(t *testing.T) {
	assert.Equal(t, int64(-100), WindowStart(-1, 100))
	assert.Equal(t, int64(0), WindowStart(0, 100))
	assert.Equal(t, int64(100), WindowStart(199, 100))
}

// After the window's length changed, the stored fixed window no longer
// lines up with the new ones: the next aligned window replaces it at its
// boundary, and a denial's RetryAfter once pointed past that (to its start
// plus the new length), denying for up to a window too long.
func TestFixedRetryAfterIsExactAfterTheWindowChanged(t *testing.T) {
	var f Fixed
	old, r := rate(2, 300*time.Millisecond, fixedWindow, 0), rate(2, 340*time.Millisecond, fixedWindow, 0)
	require.True(t, take(&f, 900*ms, old, 2).admitted()) // a window starting at 900ms, not a multiple of 340ms
	out := take(&f, 1000*ms, r, 1)
	require.False(t, out.admitted())
	assert.Equal(t, int64(1020*ms), out.ResetAt, "the next 340ms window starts at 1020ms")
	assert.False(t, take(&f, out.At+out.RetryAfter-1, r, 1).admitted(), "1µs before")
	assert.True(t, take(&f, out.At+out.RetryAfter, r, 1).admitted(), "at retry-after")
}

// A cost over the limit never fits: every algorithm denies it, whatever the
// state, without a panic (the counter once divided by zero on it, reached
// from a guard's share smaller than the cost).
func TestACostOverTheLimitIsDeniedWithoutAPanic(t *testing.T) {
	for _, alg := range kinds() {
		r := rateOf(newPolicy(alg, 2, time.Second))
		fresh := map[kind]func() decider{
			slidingWindow: func() decider { return &Log{} }, fixedWindow: func() decider { return &Fixed{} },
			slidingWindowCounter: func() decider { return &SlidingCounter{} }, gcra: func() decider { return &Bucket{} },
		}[alg]
		name := alg.String()
		{
			for _, used := range []int64{0, 1, 2} {
				d := fresh()
				for i := int64(0); i < used; i++ {
					take(d, 0, r, 1)
				}
				for _, n := range []int64{3, 4, 10} {
					for _, at := range []int64{0, 500 * ms, 1500 * ms, 5000 * ms} {
						require.NotPanics(t, func() {
							out := take(d, at, r, n)
							require.False(t, out.admitted(), "%v on %s state, %d used: cost %d at %dms", alg, name, used, n, at/ms)
							require.GreaterOrEqual(t, out.RetryAfter, int64(0))
							out = d.Peek(at, r, n)
							require.False(t, out.admitted())
						}, "%v on %s state, %d used: cost %d at %dms", alg, name, used, n, at/ms)
					}
				}
			}
		}
	}
}
