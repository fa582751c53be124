package algorithm

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A charge past the limit is recorded, and a request of cost 1 waits
// exactly what its RetryAfter says: denied a microsecond before, admitted
// then. A charge once dropped a report that overshot (1,200 of 1,000
// tokens: denied, nothing recorded), so the budget was never spent.
func TestAChargePastTheLimitIsRememberedUntilItLeaves(t *testing.T) {
	for _, alg := range kinds() {
		t.Run(alg.String(), func(t *testing.T) {
			states := map[kind]interface {
				decider
				Charge(now int64, r Rate, n int64) (Outcome, Effect)
			}{slidingWindow: &Log{}, fixedWindow: &Fixed{}, slidingWindowCounter: &SlidingCounter{}, gcra: &Bucket{}}
			st, r := states[alg], rate(10, time.Second, alg, 10)
			t0 := int64(1_700_000_000_000_000) + 250*ms // a quarter into a window
			require.True(t, take(st, t0, r, 4).admitted())
			out, e := st.Charge(t0+ms, r, 25)
			require.False(t, out.admitted(), "25 more than fit")
			require.True(t, e.Changed)
			require.Positive(t, out.RetryAfter)
			require.GreaterOrEqual(t, out.Count, int64(10), "at the limit at least")
			require.Equal(t, out, st.Peek(t0+ms, r, 1), "a charge answers as a peek of 1 afterwards")
			free := out.At + out.RetryAfter
			require.False(t, take(st, free-1, r, 1).admitted(), "1µs before its RetryAfter")
			require.True(t, take(st, free, r, 1).admitted(), "at its RetryAfter")
			switch alg {
			case slidingWindow: // the charge's units leave one window after it
				require.Equal(t, t0+ms+1000*ms, free)
			case fixedWindow: // the window ends
				require.Equal(t, t0-250*ms+1000*ms, free)
			case gcra: // 29 requests' worth less 1ms drained, to 9 at 100ms each
				require.Equal(t, t0+2000*ms, free)
			}

			out, _ = st.Charge(free+3000*ms, r, 1)
			require.True(t, out.admitted(), "a charge that fits is allowed")
		})
	}
}

// The debt a charge leaves is bounded: a window's count by MaxCharge past
// its limit, a bucket by what drains in MaxDebt, a log by its limit; every
// state saves and loads back within the stored bounds, and no RetryAfter
// leaves time.Duration.
func TestTheDebtIsBounded(t *testing.T) {
	now := int64(1_700_000_000_000_000)
	for _, alg := range kinds() {
		t.Run(alg.String(), func(t *testing.T) {
			states := map[kind]savable{slidingWindow: &Log{}, fixedWindow: &Fixed{}, slidingWindowCounter: &SlidingCounter{}, gcra: &Bucket{}}
			st := states[alg]
			r := rate(1000, time.Millisecond, alg, 7) // the fastest drain: the most units a µs
			var out Outcome
			for i := range 50 {
				out, _ = st.(interface {
					Charge(now int64, r Rate, n int64) (Outcome, Effect)
				}).Charge(now+int64(i), r, MaxCharge)
			}
			require.Less(t, out.RetryAfter, int64(math.MaxInt64/int64(time.Microsecond)), "a Duration")
			switch s := st.(type) {
			case *Fixed:
				require.Equal(t, r.Limit+MaxCharge, s.count)
			case *SlidingCounter:
				require.Equal(t, r.Limit+MaxCharge, s.cur)
			case *Bucket:
				require.LessOrEqual(t, s.level, int64(MaxStored))
				require.LessOrEqual(t, ceilDiv(s.level-r.Burst*r.Unit, r.Drain), int64(MaxDebt))
			case *Log:
				require.Equal(t, r.Limit+1, s.total, "the newest Limit+1 units")
				require.LessOrEqual(t, s.Len(), int(r.Limit)+1)
			}
			b, err := st.MarshalBinary()
			require.NoError(t, err)
			require.NoError(t, st.UnmarshalBinary(b), "within the stored bounds")
		})
	}
	var b Bucket
	slow := rate(1, 100*24*time.Hour, gcra, 1) // the slowest drain: the debt is MaxDebt's
	b.Charge(now, slow, MaxCharge)
	require.Equal(t, slow.Burst*slow.Unit+MaxDebt*slow.Drain, b.level)
}

// Undo gives back the admission it names: under 2 per minute, A admitted
// at 0s (long running), B at 30s; A fails and is undone at 31s. Refund
// dropped B's entry instead (the newest), so two more fitted at 60s while B
// still counted: 3 served within one minute. Undo drops A's: one more at
// 31s, none at 60s until B leaves at 90s.
func TestUndoGivesBackTheAdmissionItNames(t *testing.T) {
	r := rate(2, time.Minute, slidingWindow, 0)
	s := int64(time.Second / time.Microsecond)
	t0 := int64(1_700_000_000_000_000)
	var l Log
	a := take(&l, t0, r, 1)
	require.True(t, take(&l, t0+30*s, r, 1).admitted())
	out, e := l.Undo(t0+31*s, a.At, r, 1)
	require.True(t, e.Changed)
	require.Equal(t, int64(1), out.Count, "B alone")
	require.Equal(t, t0+30*s+60*s, out.ResetAt, "B leaves at 90s")
	_, e = l.Undo(t0+31*s, a.At, r, 1)
	require.False(t, e.Changed, "undone once: nothing left of it")
	require.True(t, take(&l, t0+31*s, r, 1).admitted(), "A's place")
	require.False(t, take(&l, t0+60*s, r, 1).admitted(), "B and the 31s request hold the minute")
	require.True(t, take(&l, t0+90*s, r, 1).admitted(), "B has left")

	// The windows give back only while the admission's window counts.
	var f Fixed
	fr := rate(2, time.Minute, fixedWindow, 0)
	first := take(&f, t0, fr, 2)
	out, _ = f.Undo(t0+61*s, first.At, fr, 2) // the next window
	require.Zero(t, out.Count, "nothing of it counts: nothing to give back")
	require.True(t, take(&f, t0+62*s, fr, 2).admitted())
	out, _ = f.Undo(t0+63*s, t0+62*s, fr, 5)
	require.Zero(t, out.Count, "at most what the window holds")
}
