package algorithm

import (
	"encoding"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// savable is a state that decides, refunds and saves itself.
type savable interface {
	decider
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
	Refund(now int64, r Rate, n int64) (Outcome, bool)
}

func fresh(alg kind) savable {
	switch alg {
	case fixedWindow:
		return &Fixed{}
	case slidingWindowCounter:
		return &SlidingCounter{}
	case gcra:
		return &Bucket{}
	}
	return &Log{}
}

// A state saved and loaded before every call, as a backend on a database
// keeps it, decides exactly as one kept in memory: random takes, peeks and
// refunds, clocks that step back, policies that change.
func TestAStateSavedAndLoadedDecidesTheSame(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, alg := range kinds() {
		kept, saved := fresh(alg), fresh(alg)
		now := int64(1_700_000_000_000_000)
		p := newPolicy(alg, 5, 100*time.Millisecond)
		for i := 0; i < 5000; i++ {
			now += rng.Int64N(40*ms) - 10*ms
			if rng.IntN(50) == 0 {
				p = newPolicy(alg, 1+rng.IntN(8), time.Duration(1+rng.IntN(300))*time.Millisecond)
			}
			r, n := rateOf(p), int64(1+rng.IntN(p.MaxCost()))
			data, err := saved.MarshalBinary()
			require.NoError(t, err)
			loaded := fresh(alg)
			require.NoError(t, loaded.UnmarshalBinary(data), "%v: call %d", alg, i)
			saved = loaded
			switch rng.IntN(3) {
			case 0:
				require.Equal(t, kept.Take(now, r, n), saved.Take(now, r, n), "%v: call %d, a take", alg, i)
			case 1:
				require.Equal(t, kept.Peek(now, r, n), saved.Peek(now, r, n), "%v: call %d, a peek", alg, i)
			default:
				a, okA := kept.Refund(now, r, n)
				b, okB := saved.Refund(now, r, n)
				require.Equal(t, okA, okB, "%v: call %d, a refund", alg, i)
				require.Equal(t, a, b, "%v: call %d, a refund", alg, i)
			}
		}
	}
}

// Bytes that are no state are refused with ErrBadState, and the state is
// left as it was.
func TestBadBytesAreNoState(t *testing.T) {
	for _, alg := range kinds() {
		s := fresh(alg)
		r := rateOf(newPolicy(alg, 5, time.Second))
		s.Take(0, r, 2)
		before, err := s.MarshalBinary()
		require.NoError(t, err)
		for _, bad := range [][]byte{nil, {}, {9}, {stateVersion}, append(append([]byte{}, before...), 0), before[:len(before)-1]} {
			require.ErrorIs(t, s.UnmarshalBinary(bad), ErrBadState, "%v: %v", alg, bad)
			after, _ := s.MarshalBinary()
			require.Equal(t, before, after, "%v: unchanged", alg)
		}
	}
	var l Log
	require.ErrorIs(t, l.UnmarshalBinary([]byte{stateVersion, 2, 2, 0, 2, 2}), ErrBadState, "a cost of 0")
	require.ErrorIs(t, l.UnmarshalBinary([]byte{stateVersion, 4, 2, 2, 1, 2}), ErrBadState, "entries back in time")
	var b Bucket
	require.ErrorIs(t, b.UnmarshalBinary([]byte{stateVersion, 0, 2, 0, 0}), ErrBadState, "a level without a rate")
}
