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
		now := int64(1_700_000_000_000_000)
		p := newPolicy(alg, 5, 100*time.Millisecond)
		seen := map[bool]int{}
		for i := 0; i < 20_000; i++ {
			now += rng.Int64N(40*ms) - 15*ms
			if rng.IntN(100) == 0 { // a clock further behind than MaxSkew
				now -= 2 * MaxSkew
			}
			if rng.IntN(50) == 0 {
				p = newPolicy(alg, 1+rng.IntN(8), time.Duration(1+rng.IntN(300))*time.Millisecond)
			}
			r, n := rateOf(p), int64(1+rng.IntN(p.MaxCost()))
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
