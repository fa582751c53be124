package algorithm

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// wellFormed says what is wrong with l's words, if anything: each entry a
// time (never negative, never before the one before), then minus its cost
// when that is more than 1; l.n entries, whose costs sum to l.total.
func wellFormed(l *Log) error {
	e := l.buf[l.head:]
	n, total, prev := 0, int64(0), int64(0)
	for i := 0; i < len(e); i++ {
		if e[i] < prev {
			return fmt.Errorf("word %d: %d, after a time of %d", i, e[i], prev)
		}
		prev, n, total = e[i], n+1, total+1
		if i+1 < len(e) && e[i+1] < 0 {
			if i++; e[i] > -2 {
				return fmt.Errorf("word %d: a cost of %d in two words", i, -e[i])
			}
			total += -e[i] - 1
		}
	}
	if n != l.n || total != l.total {
		return fmt.Errorf("%d entries and a total of %d, where the log says %d and %d", n, total, l.n, l.total)
	}
	return nil
}

// The Log's entries became words (a time, and a cost only when it is not
// 1); every decision is the same as when each was a (time, cost) pair:
// takes, peeks, refunds, charges and undos, with costs of 1 and more,
// clocks that step back and policies that change; and what a log saves
// is the same bytes.
func TestALogAnswersAsItsPairsDid(t *testing.T) {
	for _, maxCost := range []int{1, 3, 40} {
		t.Run(fmt.Sprintf("costs up to %d", maxCost), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(41, uint64(maxCost)))
			var l Log
			var ref refLog
			w := walk{rng: rng, alg: slidingWindow, maxLimit: 64}
			for i := 0; i < 60_000; i++ {
				now, r, n := w.next(maxCost)
				if rng.IntN(4) == 0 {
					n = 1 // most requests cost 1, whatever a policy allows
				}
				var what string
				switch op := rng.IntN(20); {
				case op < 12:
					what = "Take"
					got, ge := l.Take(now, r, n)
					want, we := ref.Take(now, r, n)
					require.Equal(t, want, got, "call %d: %s", i, what)
					require.Equal(t, we, ge, "call %d: %s", i, what)
				case op < 14:
					what = "Peek"
					require.Equal(t, ref.Peek(now, r, n), l.Peek(now, r, n), "call %d: %s", i, what)
				case op < 16:
					what = "Refund"
					k := 1 + rng.Int64N(int64(2*maxCost))
					got, ge, gok := l.Refund(now, r, k)
					want, we, wok := ref.Refund(now, r, k)
					require.Equal(t, []any{want, we, wok}, []any{got, ge, gok}, "call %d: %s of %d", i, what, k)
				case op < 18:
					what = "Charge"
					k := 1 + rng.Int64N(int64(3*maxCost))
					got, ge := l.Charge(now, r, k)
					want, we := ref.Charge(now, r, k)
					require.Equal(t, []any{want, we}, []any{got, ge}, "call %d: %s of %d", i, what, k)
				default:
					what = "Undo"
					at := now // an admission's time, or one the log does not hold
					if es := l.entries(); len(es) > 0 && rng.IntN(4) != 0 {
						at = es[rng.IntN(len(es))].At
					}
					k := 1 + rng.Int64N(int64(2*maxCost))
					got, ge := l.Undo(now, at, r, k)
					want, we := ref.Undo(now, at, r, k)
					require.Equal(t, []any{want, we}, []any{got, ge}, "call %d: %s of %d at %d", i, what, k, at)
				}
				require.NoError(t, wellFormed(&l), "call %d: after a %s", i, what)
				require.Equal(t, append([]Entry(nil), ref.e...), l.entries(), "call %d: after a %s", i, what)
				require.Equal(t, ref.Len(), l.Len(), "call %d: after a %s", i, what)
				if rng.IntN(100) == 0 {
					saved, err := l.MarshalBinary()
					require.NoError(t, err)
					var back Log
					require.NoError(t, back.UnmarshalBinary(saved))
					require.NoError(t, wellFormed(&back), "call %d: read back", i)
					require.Equal(t, l.entries(), back.entries(), "call %d: read back", i)
					want, err := refMarshal(ref)
					require.NoError(t, err)
					require.Equal(t, want, saved, "call %d: the bytes saved", i)
				}
			}
		})
	}
}

// refMarshal is what a refLog saved: Log's format, which did not change.
func refMarshal(l refLog) ([]byte, error) {
	ints := []int64{int64(len(l.e))}
	prev := int64(0)
	for _, x := range l.e {
		ints = append(ints, x.At-prev, x.Cost)
		prev = x.At
	}
	return appendInts(nil, ints...), nil
}

// A request of cost 1 takes a word of a log's buffer, one of a larger cost
// two: half of what a (time, cost) pair took, in memory and in what a Take
// reads.
func TestALogHoldsARequestOfCostOneInAWord(t *testing.T) {
	for cost, words := range map[int64]int{1: 1, 3: 2} {
		r := NewRate(1_000_000, 3600_000_000, 0)
		var l Log
		for i := range int64(1000) {
			_, e := l.Take(1_700_000_000_000_000+i, r, cost)
			require.True(t, e.Changed)
		}
		require.Equal(t, 1000, l.Len())
		require.Equal(t, 1000*words, len(l.buf)-l.head, "words held for 1,000 requests of cost %d", cost)
		require.LessOrEqual(t, cap(l.buf), 2*1000*words, "the buffer's room")
	}
}
