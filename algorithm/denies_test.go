package algorithm

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// denier is an O(1) algorithm's state, which a store may decide a denial on
// without its lock.
type denier interface {
	savable
	DeniesTo(now int64, r *Rate, n int64, out *Outcome) bool
}

// DeniesTo says true exactly when a Take would deny and leave the state's
// bytes as they were, and then gives the Take's outcome; it writes nothing
// either way: random takes and refunds, clocks that step back (so that
// states are from the future, within MaxSkew and beyond), policies that
// change.
func TestDeniesToIsADenialThatChangesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 17))
	for _, alg := range []kind{fixedWindow, slidingWindowCounter, gcra} {
		st := fresh(alg).(denier)
		w := walk{rng: rng, alg: alg, maxLimit: 8}
		seen := map[bool]int{}
		for i := 0; i < 20_000; i++ {
			now, r, n := w.next(8)
			before, err := st.MarshalBinary()
			require.NoError(t, err)
			var denied Outcome
			denies := st.DeniesTo(now, &r, n, &denied)
			after, err := st.MarshalBinary()
			require.NoError(t, err)
			require.Equal(t, before, after, "%v: call %d: DeniesTo wrote the state", alg, i)
			seen[denies]++

			took, e := st.Take(now, r, n)
			after, err = st.MarshalBinary()
			require.NoError(t, err)
			unchanged := !took.Allowed() && bytes.Equal(before, after)
			require.Equal(t, unchanged, denies, "%v: call %d: DeniesTo against a Take's denial that changed nothing (%+v)", alg, i, took)
			if denies {
				require.Equal(t, took, denied, "%v: call %d: DeniesTo's outcome against the Take's", alg, i)
				require.False(t, e.Changed)
			}
			if rng.IntN(4) == 0 {
				_, _, _ = st.Refund(now, r, 1)
			}
		}
		require.Positive(t, seen[true], "%v: nothing was denied", alg)
		require.Positive(t, seen[false], "%v: everything was denied", alg)
	}
}

// A LogDenial copied out of a log says true exactly when a Take would deny
// without re-timing an entry from the future, as long as it holds every
// entry of the log (at most logDenialEntries); past that, when it says true
// it is right. Its outcome is the Take's: random costs and clocks that step
// back, policies that change, logs longer than the copy holds.
func TestALogDenialDeniesAsTheLogWould(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 23))
	var l Log
	w := walk{rng: rng, alg: slidingWindow, maxLimit: 16} // logs past the copy's eight entries
	seen := map[string]int{}
	for i := 0; i < 50_000; i++ {
		now, r, n := w.next(3)
		d := l.Denial()
		whole := l.Len() <= logDenialEntries
		fromTheFuture := l.Len() > 0 && l.newest() > l.keyTime(now)
		before, err := l.MarshalBinary()
		require.NoError(t, err)
		var denied Outcome
		denies := d.DeniesTo(now, &r, n, &denied)
		after, err := l.MarshalBinary()
		require.NoError(t, err)
		require.Equal(t, before, after, "call %d: DeniesTo wrote the log", i)

		var kept []Entry // what a Take that only prunes leaves
		for _, x := range l.entries() {
			if x.At > l.keyTime(now)-r.Window {
				kept = append(kept, x)
			}
		}
		took, _ := l.Take(now, r, n)
		switch {
		case denies:
			require.Equal(t, took, denied, "call %d: DeniesTo's outcome against the Take's", i)
			require.Equal(t, kept, l.entries(), "call %d: the Take did more than prune", i)
			seen["denied"]++
		case whole && !took.Allowed() && !fromTheFuture:
			t.Fatalf("call %d: the copy held the whole log and declined a Take's denial %+v", i, took)
		case !took.Allowed():
			seen["declined"]++
		}
		if rng.IntN(8) == 0 {
			_, _, _ = l.Refund(now, r, 1)
		}
	}
	require.Greater(t, seen["denied"], 1000, "%v", seen)
	require.Positive(t, seen["declined"], "%v: the copies never declined a denial", seen)
}

// walk is the clock and the policy of alg the denial tests decide at: the
// clock moves by -15 to +25ms a call, and one call in a hundred further
// back than MaxSkew (so that states are from the future, within MaxSkew
// and beyond); one in fifty changes the policy, to a limit of 1 to
// maxLimit and a window of up to 300ms.
type walk struct {
	rng      *rand.Rand
	alg      kind
	maxLimit int
	now      int64
	p        policy
}

// next moves the walk on: the time, the rate and a cost of at most
// maxCost (and the policy's) to decide.
func (w *walk) next(maxCost int) (now int64, r Rate, n int64) {
	if w.now == 0 {
		w.now, w.p = 1_700_000_000_000_000, newPolicy(w.alg, min(5, w.maxLimit), 100*time.Millisecond)
	}
	w.now += w.rng.Int64N(40*ms) - 15*ms
	if w.rng.IntN(100) == 0 {
		w.now -= 2 * MaxSkew
	}
	if w.rng.IntN(50) == 0 {
		w.p = newPolicy(w.alg, 1+w.rng.IntN(w.maxLimit), time.Duration(1+w.rng.IntN(300))*time.Millisecond)
	}
	return w.now, rateOf(w.p), int64(1 + w.rng.IntN(min(w.p.MaxCost(), maxCost)))
}
