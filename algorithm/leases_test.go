package algorithm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// At most Limit permits are held; a denial says how many and when the first
// lease ends; a renewed lease lasts; a release, even twice, frees once; an
// ended lease frees itself; the state saves and loads back.
func TestLeasesHoldAtMostTheLimit(t *testing.T) {
	r := NewRate(3, int64(10*time.Second/time.Microsecond), 0) // 3 permits, leases of 10s
	s := int64(time.Second / time.Microsecond)
	t0 := int64(1_700_000_000_000_000)
	var l Leases
	for id := int64(1); id <= 3; id++ {
		out, e := l.Acquire(t0+id*s, r, id)
		require.True(t, out.admitted(), "permit %d", id)
		require.Equal(t, id, out.Count)
		require.True(t, e.Changed)
	}
	out, e := l.Acquire(t0+4*s, r, 4)
	require.False(t, out.admitted(), "a fourth")
	require.False(t, e.Changed, "a denial records nothing")
	require.Equal(t, int64(3), out.Count)
	require.Equal(t, t0+11*s, out.ResetAt, "the first lease ends at 11s")
	require.Equal(t, 7*s, out.RetryAfter)

	out, _ = l.Acquire(t0+5*s, r, 1) // holder 1 renews: its lease now ends at 15s
	require.True(t, out.admitted(), "a renewal, with every permit held")
	require.Equal(t, t0+12*s, out.ResetAt, "holder 2's ends first now")

	out, e = l.Release(t0+6*s, r, 2)
	require.True(t, e.Changed)
	require.Equal(t, int64(2), out.Count)
	_, e = l.Release(t0+6*s, r, 2)
	require.False(t, e.Changed, "released twice: nothing more")
	require.True(t, mustAcquire(&l, t0+6*s, r, 4))

	// Nobody renews: every lease ends, and the permits are back.
	out = l.Peek(t0+16*s, r, 3)
	require.True(t, out.admitted())
	require.Zero(t, out.Count)
	_, e = l.Release(t0+20*s, r, 3) // after its lease ended: harmless
	require.True(t, e.Changed, "the ended leases were pruned")
	require.Zero(t, l.Len())

	// Peeking at more than the limit: never.
	require.False(t, l.Peek(t0+21*s, r, 4).admitted())

	b, err := l.MarshalBinary()
	require.NoError(t, err)
	var back Leases
	require.NoError(t, back.UnmarshalBinary(b))
	require.Equal(t, l.Peek(t0+21*s, r, 1), back.Peek(t0+21*s, r, 1))
	require.ErrorIs(t, back.UnmarshalBinary([]byte{stateVersion, 2, 0, 2}), ErrBadState, "an id of 0")
}

func mustAcquire(l *Leases, now int64, r Rate, id int64) bool {
	out, _ := l.Acquire(now, r, id)
	return out.admitted()
}
