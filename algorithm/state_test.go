package algorithm

import (
	"encoding"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"math"
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
	Refund(now int64, r Rate, n int64) (Outcome, Effect, bool)
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
				require.Equal(t, take(kept, now, r, n), take(saved, now, r, n), "%v: call %d, a take", alg, i)
			case 1:
				require.Equal(t, kept.Peek(now, r, n), saved.Peek(now, r, n), "%v: call %d, a peek", alg, i)
			default:
				a, ea, okA := kept.Refund(now, r, n)
				b, eb, okB := saved.Refund(now, r, n)
				require.Equal(t, okA, okB, "%v: call %d, a refund", alg, i)
				require.Equal(t, a, b, "%v: call %d, a refund", alg, i)
				require.Equal(t, ea, eb, "%v: call %d, a refund", alg, i)
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
		take(s, 0, r, 2)
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

// A saved state is distrusted: a field holding a number no decision writes
// (negative, beyond MaxStored) is refused with ErrBadState and changes
// nothing, in every field of every state; and a store that then decides
// on a fresh state admits no more than a fresh key would. Before, a Fixed
// count of -1e15 admitted without bound, and a Log whose costs summed
// past int64 wrapped to a negative count.
func TestOutOfBoundNumbersAreNoState(t *testing.T) {
	fields := map[kind]int{fixedWindow: 4, slidingWindowCounter: 4, gcra: 4}
	for _, alg := range []kind{fixedWindow, slidingWindowCounter, gcra} {
		for i := 0; i < fields[alg]; i++ {
			for _, bad := range []int64{-1, -1e15, MaxStored + 1, math.MaxInt64, math.MinInt64} {
				v := []int64{1, 1_700_000_000_000_000, 1, 1}
				v[i] = bad
				s := fresh(alg)
				require.ErrorIs(t, s.UnmarshalBinary(appendInts(nil, v...)), ErrBadState, "%v: field %d = %d", alg, i, bad)
				require.Equal(t, fresh(alg), s, "%v: unchanged", alg)
			}
		}
	}
	require.ErrorIs(t, new(Fixed).UnmarshalBinary(appendInts(nil, 2, 1, 1, 1)), ErrBadState, "started is 0 or 1")
	require.ErrorIs(t, new(SlidingCounter).UnmarshalBinary(appendInts(nil, 7, 1, 1, 1)), ErrBadState, "started is 0 or 1")
	for name, ints := range map[string][]int64{
		"a negative first time":        {1, -5, 1},
		"a time beyond MaxStored":      {2, 1, 1, MaxStored, 1},
		"a cost beyond MaxStored":      {1, 1, MaxStored + 1},
		"costs summing past MaxStored": {2, 1, MaxStored, 0, 1},
		"costs wrapping int64":         {2, 1, math.MaxInt64, 0, math.MaxInt64},
	} {
		var l Log
		require.ErrorIs(t, l.UnmarshalBinary(appendInts(nil, ints...)), ErrBadState, name)
		require.Zero(t, l.Len(), name)
	}
	// The largest state a decision writes still loads.
	for _, alg := range []kind{fixedWindow, slidingWindowCounter, gcra} {
		require.NoError(t, fresh(alg).UnmarshalBinary(appendInts(nil, 1, MaxStored, MaxStored, MaxStored)), "%v", alg)
	}
}

// The saved-state format is in the package documentation, where go doc
// shows it (it was once a comment detached from any declaration).
func TestTheStateFormatIsDocumented(t *testing.T) {
	fset := token.NewFileSet()
	files := []*ast.File{}
	for _, name := range []string{"algorithm.go", "state.go"} {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		require.NoError(t, err)
		files = append(files, f)
	}
	p, err := doc.NewFromFiles(fset, files, "github.com/ratelimit-go/ratelimit/algorithm")
	require.NoError(t, err)
	for _, s := range []string{"# Saved state", "zigzag varint", "Fixed: started", "Bucket: the time of the level", "Compatibility:"} {
		require.Contains(t, p.Doc, s)
	}
}
