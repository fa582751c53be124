package algorithm

import (
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The saved bytes of version 1, pinned: states made by decisions at fixed
// times save to these bytes, and these bytes load to states that decide as
// the originals do. A change here is a change of format: it takes a new
// version byte, and version 1's reader stays (see the format in state.go).
func TestTheSavedBytes(t *testing.T) {
	const t0 = int64(1_700_000_000_000_000) // µs
	cases := []struct {
		alg    kind
		burst  int
		takes  []int64 // the times of takes of cost 1, µs after t0
		golden string
	}{
		// version 1 | started 1 | start t0 | count 3 | aligned to 100,000 µs
		{fixedWindow, 0, []int64{0, 10, 20}, "01028080f2818389850606c09a0c"},
		// version 1 | started 1 | start t0+100,000 | previous 2 | current 1
		{slidingWindowCounter, 0, []int64{0, 10, 150_000}, "0102c09afe81838985060402"},
		// version 1 | at t0+10 | level 39,990 | unit 20,000 | drain 1
		{gcra, 4, []int64{0, 10}, "019480f28183898506ecf004c0b80202"},
		// version 1 | 4 entries | t0, cost 1 | +10, 1 | +0, 1 | +20, 1
		{slidingWindow, 0, []int64{0, 10, 10, 30}, "01088080f2818389850602140200022802"},
	}
	for _, c := range cases {
		p := newPolicy(c.alg, 5, 100*time.Millisecond)
		if c.alg == gcra {
			p = policy{Limit: 5, Window: 100 * time.Millisecond, Algorithm: gcra, Burst: c.burst}
		}
		r := rateOf(p)
		st := fresh(c.alg)
		for _, at := range c.takes {
			require.True(t, take(st, t0+at, r, 1).admitted(), "%v: the take at %d", c.alg, at)
		}
		data, err := st.MarshalBinary()
		require.NoError(t, err)
		require.Equal(t, c.golden, hex.EncodeToString(data), "%v: the saved bytes", c.alg)

		golden, err := hex.DecodeString(c.golden)
		require.NoError(t, err)
		loaded := fresh(c.alg)
		require.NoError(t, loaded.UnmarshalBinary(golden), "%v", c.alg)
		for _, at := range []int64{40, 60_000, 250_000} {
			require.Equal(t, st.Peek(t0+at, r, 1), loaded.Peek(t0+at, r, 1), "%v: a peek %dµs on", c.alg, at)
		}
	}
}
