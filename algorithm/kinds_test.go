package algorithm

import (
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// The tests of this package name policies as package ratelimit does, with
// types of their own: package algorithm imports nothing of the module, and
// its tests cannot (the module's root imports it).

type kind uint8

const (
	slidingWindow kind = iota
	fixedWindow
	slidingWindowCounter
	gcra
)

const maxLogLimit = 10_000

func kinds() []kind { return []kind{slidingWindow, fixedWindow, slidingWindowCounter, gcra} }

func (k kind) String() string {
	return [...]string{"sliding", "fixed", "counter", "gcra"}[k]
}

type policy struct {
	Limit     int
	Window    time.Duration
	Algorithm kind
	Burst     int
}

func newPolicy(alg kind, n int, window time.Duration) policy {
	p := policy{Limit: n, Window: window, Algorithm: alg}
	if alg == gcra {
		p.Burst = n
	}
	return p
}

func (p policy) MaxCost() int {
	if p.Algorithm == gcra {
		return p.Burst
	}
	return p.Limit
}

func (p policy) String() string { return fmt.Sprintf("%d per %v (%v)", p.Limit, p.Window, p.Algorithm) }

// admitted is whether o admits its request, as the algorithm decided it: at
// any time, 0 included, which these tests start at (Allowed is false for
// any Outcome at 0, which no store decides at).
func (o Outcome) admitted() bool { return o.RetryAfter == 0 }

// An Outcome is four words, which cross a store's interface in registers;
// it says its decision by RetryAfter; the zero Outcome, which comes beside
// an error, admits nothing; and a denial waits at least 1µs, however the
// algorithm rounded.
func TestAnOutcomeSaysItsDecision(t *testing.T) {
	require.Equal(t, uintptr(32), unsafe.Sizeof(Outcome{}), "four words")
	require.False(t, Outcome{}.Allowed(), "the zero Outcome")
	require.True(t, Outcome{At: 1}.Allowed())
	require.False(t, Outcome{At: 1, RetryAfter: 1}.Allowed())
	var o Outcome
	o.set(3, 5, 7)
	require.True(t, o.Allowed())
	o.deny(0)
	require.Equal(t, Outcome{Count: 3, ResetAt: 5, RetryAfter: 1, At: 7}, o)
	require.False(t, o.Allowed())
}
