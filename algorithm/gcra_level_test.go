package algorithm

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The bucket's hot path computes its level and count without a call
// (drainedTo, a bucketCount small enough to inline): each equals the
// general formula, over random levels, rates and elapsed times, drains of 1
// (no division) and above, and the edges (empty, just drained, full).
func TestBucketLevelAndCountInlineAreTheFormula(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 29))
	for i := 0; i < 200_000; i++ {
		r := NewRate(1+rng.Int64N(1000), 1+rng.Int64N(10_000_000), 1+rng.Int64N(50))
		if i%3 == 0 { // a limit that divides the window: a drain of 1
			r = NewRate(1+rng.Int64N(100), 1_000_000, 1+rng.Int64N(50))
		}
		full := r.Burst * r.Unit
		level := rng.Int64N(full + 1)
		switch i % 7 {
		case 0:
			level = 0
		case 1:
			level = full
		}
		at := int64(1_700_000_000_000_000)
		elapsed := 1 + rng.Int64N(2*ceilDiv(max(level, 1), r.Drain)+2)
		b := Bucket{at: at, level: level, unit: r.Unit, drain: r.Drain}
		now := at + elapsed

		require.True(t, b.under(&r, now))
		want := max(level-elapsed*r.Drain, 0) // drained at r's rate since at
		require.Equal(t, want, b.drainedTo(now, &r), "level %d, elapsed %d, %+v", level, elapsed, r)
		require.Equal(t, b.levelOther(now, &r), b.drainedTo(now, &r))

		count, next := bucketCount(want, now, &r)
		if want == 0 {
			require.Equal(t, [2]int64{0, now}, [2]int64{count, next})
			continue
		}
		wantCount := ceilDiv(want, r.Unit)
		require.Equal(t, wantCount, count, "level %d, %+v", want, r)
		require.Equal(t, now+ceilDiv(want-(wantCount-1)*r.Unit, r.Drain), next)
	}
}
