package rlqs

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFairSharesExamples(t *testing.T) {
	for _, c := range []struct {
		limit   int64
		demands []int64
		want    []int64
	}{
		{1000, []int64{600, 600}, []int64{500, 500}},             // both over: equal
		{1000, []int64{100, 2000, 2000}, []int64{100, 450, 450}}, // a small one gets its ask, the rest share
		{1000, []int64{100, 300}, []int64{400, 600}},             // under the limit: each its ask, the spare split
		{1000, []int64{0, 5000}, []int64{0, 1000}},               // an idle plane leaves all to the other
		{10, []int64{5, 5, 5}, []int64{3, 3, 4}},                 // rounding's unit to the last served
		{0, []int64{5, 5}, []int64{0, 0}},
	} {
		require.Equal(t, c.want, FairShares(c.limit, c.demands), "%d split by %v", c.limit, c.demands)
	}
	require.Nil(t, FairShares(1000, nil))
}

// Over random demands: the shares sum to the limit; under it every plane
// gets its demand; over it none gets more than its demand (but a unit of
// rounding) and none with its demand unmet is under another's share by
// more than a unit: max-min fair.
func TestFairSharesAreMaxMinFair(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10_000 {
		limit := rng.Int64N(5000)
		demands := make([]int64, 1+rng.IntN(20))
		total := int64(0)
		for i := range demands {
			demands[i] = rng.Int64N(1 + rng.Int64N(3000))
			total += demands[i]
		}
		shares := FairShares(limit, demands)
		sum := int64(0)
		for _, s := range shares {
			sum += s
		}
		require.Equal(t, limit, sum, "%d by %v: %v", limit, demands, shares)
		for i, s := range shares {
			if total <= limit {
				require.GreaterOrEqual(t, s, demands[i], "%d by %v: %v", limit, demands, shares)
				continue
			}
			require.LessOrEqual(t, s, demands[i]+1, "%d by %v: %v", limit, demands, shares)
			if s < demands[i] {
				for j, o := range shares {
					require.LessOrEqual(t, o, s+1, "%d by %v: %v (%d unmet, %d above)", limit, demands, shares, i, j)
				}
			}
		}
	}
}
