package lua

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/backend"
)

// A rule's numbers reach the scripts exactly: packed as doubles (packRule),
// each number a rule may hold, at its bounds too, unpacks to itself.
func TestPackedRulesAreExact(t *testing.T) {
	for _, c := range []struct {
		alg           backend.Algorithm
		limit         int64
		window        time.Duration
		burst         int64
		retain, block time.Duration
	}{
		{backend.FixedWindow, backend.MaxLimit, backend.MaxFixedWindow, 0, backend.MaxFixedWindow, backend.MaxWindow},
		{backend.SlidingWindow, backend.MaxLogLimit, backend.MaxWindow, 0, backend.MaxWindow, 0},
		{backend.SlidingWindowCounter, backend.MaxLimit, backend.MaxWindow, 0, backend.MaxWindow, time.Millisecond},
		{backend.GCRA, 1, backend.MaxWindow, 521, backend.MaxWindow, 0},
		{backend.GCRA, 7, 3*time.Second + time.Microsecond, 521, time.Hour, 0},
		{backend.GCRA, backend.MaxLimit, backend.MinWindow, 3, backend.MinWindow, time.Second},
		{backend.InFlight, 9, time.Minute, 0, time.Minute, 0},
	} {
		r, err := backend.NewRule(c.alg, c.limit, c.window, c.burst, c.retain, "p:")
		require.NoError(t, err, "%+v", c)
		if c.block > 0 {
			r, err = r.WithBlock(c.block)
			require.NoError(t, err, "%+v", c)
		}
		rate := r.Rate()
		want := []int64{(r.Retain() + 999) / 1000, rate.Limit, rate.Window, 0, r.Block()}
		if c.alg == backend.GCRA {
			want[1], want[2], want[3] = rate.Burst, rate.Unit, rate.Drain
		}
		packed := packRule(r)
		require.Len(t, packed, 8*len(want))
		for i, n := range want {
			x := math.Float64frombits(binary.LittleEndian.Uint64([]byte(packed[8*i:])))
			require.Equal(t, float64(n), x, "%+v: number %d", c, i)
			require.Equal(t, n, int64(x), "%+v: number %d is not exact", c, i)
		}
	}
}
