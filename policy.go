package ratelimit

import (
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
)

// Algorithm selects how a Policy counts requests (see the package
// documentation for the model, and the README for a table to choose by).
// The zero value is SlidingWindow. It is the backend contract's own type,
// so a ratelimit.Algorithm is a backend.Algorithm: nothing converts.
type Algorithm = backend.Algorithm

const (
	// SlidingWindow keeps a log of the admitted requests, scored by time,
	// and counts those in the last Window: exact, with no boundary burst.
	// A request of cost n is one entry, so a key holds at most Limit
	// entries; Limit is therefore bounded by MaxLogLimit.
	SlidingWindow = backend.SlidingWindow
	// FixedWindow counts requests in windows aligned to multiples of
	// Window (since the Unix epoch); the count restarts at each boundary.
	// One counter per key, but a client can get 2*Limit requests through
	// in a short time around a boundary.
	FixedWindow = backend.FixedWindow
	// SlidingWindowCounter keeps two fixed-window counts per key, the
	// current and the previous window's, and weighs the previous one by
	// how much of it the sliding window still covers, in thousandths: the
	// count is ceil(p*k/1000) + current, where p is the previous window's
	// count and k = ceil((Window-e)*1000/Window) the thousandths still
	// covered when e of the current window has passed. Both round up, the
	// safe way: rounding never admits more, and with a small limit a
	// request still weighs a whole one until its window is two windows
	// past (p = 1 counts 1 for all of the next window). O(1) memory. It
	// assumes the previous window's requests were evenly spread: in any
	// interval of one Window it admits at most Limit + p - ceil(p*k/1000)
	// (about Limit + p*e/Window); never more than Limit in one aligned
	// window, and under 2*Limit in any interval, reached only when a whole
	// window's quota came at the very end of the previous one.
	SlidingWindowCounter = backend.SlidingWindowCounter
	// GCRA is the generic cell rate algorithm, a token bucket without a
	// refill loop: requests are spaced evenly at Limit per Window (one every
	// Window/Limit), and up to Burst may come at once. O(1) memory: one
	// value per key. In any interval of length t it admits at most Burst +
	// t*Limit/Window requests; RetryAfter is exact.
	GCRA = backend.GCRA
	// InFlight is no rate: at most Limit requests of a key in progress at
	// once, each holding a permit, a lease of Window that it renews while
	// it works (Limiter.Acquire; see Concurrency).
	InFlight = backend.InFlight
)

// Bounds of a Policy: every backend decides within them exactly (Lua
// numbers are doubles, exact up to 2^53) and in bounded time and memory.
const (
	// MaxLimit bounds Limit and Burst for every algorithm: about 1.1e12.
	MaxLimit = backend.MaxLimit
	// MaxLogLimit bounds Limit for SlidingWindow, whose memory and worst
	// decision grow with it (at most one entry per admitted request). For
	// larger limits use SlidingWindowCounter or GCRA, whose state is O(1).
	MaxLogLimit = backend.MaxLogLimit
	// MaxWindow bounds Window: 100 days.
	MaxWindow = backend.MaxWindow
	// MaxFixedWindow bounds a FixedWindow's Window: 366 days (a year).
	MaxFixedWindow = backend.MaxFixedWindow
)

// Policy is a limit of Limit requests per Window, counted by Algorithm; for
// GCRA, a rate of Limit per Window with bursts of up to Burst.
//
// The window algorithms (SlidingWindow, FixedWindow, SlidingWindowCounter)
// admit at most Limit per window and have no Burst (it must be 0). GCRA
// spaces requests at Limit per Window and lets a key that has been idle
// make Burst at once: TokenBucket(10, time.Second, 20) is 10 per second
// sustained, 20 at once. Under GCRA a Decision's Limit is Burst, and its
// Count the requests' worth of quota in use.
type Policy struct {
	// Limit is the number of requests admitted per window (for GCRA: the
	// rate, per window); 1 to MaxLimit, and to MaxLogLimit for
	// SlidingWindow.
	Limit int
	// Window is the length of the window (for GCRA: the period of the
	// rate); 1ms to MaxWindow (a FixedWindow's to MaxFixedWindow). It is
	// kept to microsecond precision (the finer part is dropped).
	Window time.Duration
	// Algorithm is SlidingWindow (the zero value), FixedWindow,
	// SlidingWindowCounter or GCRA.
	Algorithm Algorithm
	// Burst is, for GCRA only, how many requests a key may make at once:
	// 1 to MaxLimit, and the largest cost a request may have. It must be 0
	// for the other algorithms.
	Burst int
	// Block is a penalty box (0: none; up to MaxWindow): a key denied, or
	// charged past what fits, stays denied for Block from then, whatever
	// its quota, decided in the store's same step; Reset lifts it. See
	// BlockFor.
	Block time.Duration
}

// BlockFor is p with a penalty box of d: a key that p denies (or that a
// Charge takes past its quota) is denied everything for d from then (a
// Charge still records its usage), each Decision's RetryAfter the box's
// rest; Limiter.Reset lets it out. A near cache holds the denial until the
// box ends.
func (p Policy) BlockFor(d time.Duration) Policy {
	p.Block = d
	return p
}

// PerSecond is a sliding-window policy of n requests per second.
func PerSecond(n int) Policy { return Policy{Limit: n, Window: time.Second} }

// PerMinute is a sliding-window policy of n requests per minute.
func PerMinute(n int) Policy { return Policy{Limit: n, Window: time.Minute} }

// PerHour is a sliding-window policy of n requests per hour.
func PerHour(n int) Policy { return Policy{Limit: n, Window: time.Hour} }

// NewPolicy is n requests per window under alg; under GCRA a rate of n per
// window with a burst of n, so that a key that has been idle may make n
// requests at once, as under the window algorithms. For choosing the
// algorithm by configuration.
func NewPolicy(alg Algorithm, n int, window time.Duration) Policy {
	p := Policy{Limit: n, Window: window, Algorithm: alg}
	if alg == GCRA {
		p.Burst = n
	}
	return p
}

// TokenBucket is a GCRA policy: rate requests per period, evenly spaced,
// and up to burst at once.
func TokenBucket(rate int, period time.Duration, burst int) Policy {
	return Policy{Limit: rate, Window: period, Algorithm: GCRA, Burst: burst}
}

// Concurrency is an InFlight policy: at most n requests of a key in progress
// at once, across every instance sharing the store, each holding a permit
// leased for lease at a time and renewed while it works; a holder that
// crashed has its permit back within lease (plus the store's slack).
func Concurrency(n int, lease time.Duration) Policy {
	return Policy{Limit: n, Window: lease, Algorithm: InFlight}
}

// Validate reports why p cannot be used, wrapping ErrInvalidPolicy, or nil:
// a limit or burst not in [1, MaxLimit], a sliding log over MaxLogLimit, a
// window not in [1ms, MaxWindow] (MaxFixedWindow for a fixed one), a
// burst on a window algorithm, a GCRA queue too long to compute exactly,
// an unknown algorithm.
func (p Policy) Validate() error {
	rule, err := backend.NewRule(p.Algorithm, int64(p.Limit), p.Window, int64(p.Burst), max(p.Window, backend.MinWindow), "")
	if err == nil && p.Block != 0 {
		_, err = rule.WithBlock(p.Block)
	}
	return err
}

// MaxCost is the largest cost a request may have under p: Limit, or Burst
// for GCRA.
func (p Policy) MaxCost() int {
	if p.Algorithm == GCRA {
		return p.Burst
	}
	return p.Limit
}

// String formats p as "100 per 1m0s (sliding)", or "10 per 1s, burst 20
// (gcra)".
func (p Policy) String() string {
	block := ""
	if p.Block != 0 {
		block = fmt.Sprintf(", blocking %v", p.Block)
	}
	if p.Algorithm == GCRA {
		return fmt.Sprintf("%d per %v, burst %d (%v)%s", p.Limit, p.Window, p.Burst, p.Algorithm, block)
	}
	return fmt.Sprintf("%d per %v (%v)%s", p.Limit, p.Window, p.Algorithm, block)
}
