package algorithm

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Effect.Changed is true exactly when the decision changed the state's
// saved bytes, so that a store on a database may skip the write of a state
// not Changed: random takes, peeks and refunds, clocks that step back,
// policies that change. A peek never changes anything.
func TestChangedIsWhetherTheSavedBytesChanged(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, alg := range kinds() {
		st := fresh(alg)
		now := int64(1_700_000_000_000_000)
		p := newPolicy(alg, 5, 100*time.Millisecond)
		seen := map[bool]int{}
		for i := 0; i < 20_000; i++ {
			now += rng.Int64N(40*ms) - 10*ms
			if rng.IntN(50) == 0 {
				p = newPolicy(alg, 1+rng.IntN(8), time.Duration(1+rng.IntN(300))*time.Millisecond)
			}
			r, n := rateOf(p), int64(1+rng.IntN(p.MaxCost()))
			before, err := st.MarshalBinary()
			require.NoError(t, err)
			var e Effect
			what := "a take"
			switch rng.IntN(3) {
			case 0:
				_, e = st.Take(now, r, n)
			case 1:
				st.Peek(now, r, n)
				what = "a peek" // no Effect: a peek changes nothing (checked against the bytes)
			default:
				_, e, _ = st.Refund(now, r, n)
				what = "a refund"
			}
			after, err := st.MarshalBinary()
			require.NoError(t, err)
			require.Equal(t, !bytes.Equal(before, after), e.Changed, "%v: call %d, %s: Changed against the bytes", alg, i, what)
			seen[e.Changed]++
		}
		require.Positive(t, seen[true], "%v: no call changed the state", alg)
		require.Positive(t, seen[false], "%v: every call changed the state", alg)
	}
}
