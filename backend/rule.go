package backend

import (
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit/algorithm"
	"github.com/ratelimit-go/ratelimit/internal/owner"
)

// Algorithm is the algorithm a Rule decides under. ratelimit.Algorithm is
// this type (an alias), as io/fs.FileMode is os.FileMode: one type, and its
// constants are the same values under the same names.
type Algorithm uint8

// The algorithms; package algorithm has their rules. InFlight is no rate:
// a key holds at most Limit permits at once, each a lease of Window that
// its holder renews while it works (Store.Acquire and Release).
const (
	SlidingWindow Algorithm = iota
	FixedWindow
	SlidingWindowCounter
	GCRA
	InFlight
	numAlgorithms
)

// Algorithms is every algorithm of a rate (InFlight is none), in the order
// of their values.
func Algorithms() []Algorithm {
	return []Algorithm{SlidingWindow, FixedWindow, SlidingWindowCounter, GCRA}
}

// String returns "sliding", "fixed", "counter" or "gcra".
func (a Algorithm) String() string {
	switch a {
	case SlidingWindow:
		return "sliding"
	case FixedWindow:
		return "fixed"
	case SlidingWindowCounter:
		return "counter"
	case GCRA:
		return "gcra"
	case InFlight:
		return "inflight"
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// The bounds of a rule: every store decides within them exactly (a Lua
// script's numbers are doubles, exact up to 2^53) and in bounded time and
// memory. Package ratelimit exports them under the same names.
const (
	// MaxLimit bounds a limit and a burst: about 1.1e12.
	MaxLimit = 1 << 40
	// MaxCharge bounds the cost of a Charge, which may pass a rule's
	// MaxCost (package algorithm bounds the debt it leaves).
	MaxCharge = algorithm.MaxCharge
	// MaxLogLimit bounds the limit of SlidingWindow, which keeps an entry
	// per admitted request.
	MaxLogLimit = 10_000
	// MaxWindow bounds a window: 100 days (the sliding-window counter's
	// weights, thousandths of a window in µs, stay exact under 2^53).
	MaxWindow = 100 * 24 * time.Hour
	// MaxFixedWindow bounds a FixedWindow's window, whose arithmetic never
	// multiplies one: 366 days, room for envoyproxy/ratelimit's year of
	// 365. Its retention may be as long as its window.
	MaxFixedWindow = 366 * 24 * time.Hour
	// MinWindow is the shortest window.
	MinWindow = time.Millisecond
	// MaxGCRAUnits bounds a burst times the weight of a request in GCRA's
	// exact units (see algorithm.NewRate).
	MaxGCRAUnits = 1 << 52
)

// Rule is a policy compiled once, for every decision under it: a Limiter
// compiles its policy at New and SetPolicy, and a PolicyFunc's answers once
// each. It holds everything a store derives from a policy, in the units the
// algorithms compute in, and is immutable: requests carry it by pointer.
type Rule struct {
	rate    algorithm.Rate
	maxCost int64
	retain  int64 // µs
	prefix  string
	alg     Algorithm
	block   int64        // µs: the penalty box (WithBlock); 0: none
	own     owner.Values // what stores derived from the rule: see Own
}

// NewRule compiles a policy of limit requests per window under alg (for
// GCRA, a rate of limit per window with bursts of burst; burst is 0 for the
// window algorithms), whose state is kept at least retain after each write
// (at least the window), for keys under prefix. A policy outside its bounds
// is an error wrapping ErrInvalidPolicy, a prefix longer than MaxPrefixLen
// one wrapping ErrInvalidKey, and a retention outside [window, MaxWindow]
// (a FixedWindow longer than MaxWindow: the window) one wrapping
// ErrInvalidArgument. The window is kept to the microsecond.
func NewRule(alg Algorithm, limit int64, window time.Duration, burst int64, retain time.Duration, prefix string) (*Rule, error) {
	if err := checkPolicy(alg, limit, window, burst); err != nil {
		return nil, err
	}
	if len(prefix) > MaxPrefixLen {
		return nil, fmt.Errorf("%w: prefix of %d bytes, more than %d", ErrInvalidKey, len(prefix), MaxPrefixLen)
	}
	window = window.Truncate(time.Microsecond)
	if retain < window || retain > max(MaxWindow, window) {
		return nil, fmt.Errorf("%w: retention %v is not in [the window %v, MaxWindow]", ErrInvalidArgument, retain, window)
	}
	if alg != GCRA {
		burst = 0
	}
	r := &Rule{rate: algorithm.NewRate(limit, window.Microseconds(), burst), maxCost: limit, retain: retain.Microseconds(), prefix: prefix, alg: alg}
	if alg == GCRA {
		r.maxCost = burst
	}
	return r, nil
}

// checkPolicy reports, wrapping ErrInvalidPolicy, why a policy cannot be
// compiled: a limit or burst not in [1, MaxLimit], a sliding log over
// MaxLogLimit, a window not in [MinWindow, MaxWindow] (a FixedWindow's up
// to MaxFixedWindow), a burst on a window
// algorithm, a GCRA queue too long to compute exactly, an unknown algorithm.
func checkPolicy(alg Algorithm, limit int64, window time.Duration, burst int64) error {
	switch {
	case limit <= 0:
		return fmt.Errorf("%w: limit %d is not positive", ErrInvalidPolicy, limit)
	case limit > MaxLimit:
		return fmt.Errorf("%w: limit %d is over MaxLimit (%d)", ErrInvalidPolicy, limit, MaxLimit)
	case window < MinWindow:
		return fmt.Errorf("%w: window %v is shorter than 1ms", ErrInvalidPolicy, window)
	case window > MaxFixedWindow || window > MaxWindow && alg != FixedWindow:
		return fmt.Errorf("%w: window %v is longer than MaxWindow (%v; a fixed window's may be up to %v)", ErrInvalidPolicy, window, MaxWindow, MaxFixedWindow)
	}
	switch alg {
	case InFlight:
		if limit > MaxLogLimit {
			return fmt.Errorf("%w: %d permits, over MaxLogLimit (%d): a store keeps a lease per permit", ErrInvalidPolicy, limit, MaxLogLimit)
		}
	case SlidingWindow:
		if limit > MaxLogLimit {
			return fmt.Errorf("%w: limit %d is over MaxLogLimit (%d) for the sliding log, which keeps an entry per request: use SlidingWindowCounter or GCRA", ErrInvalidPolicy, limit, MaxLogLimit)
		}
	case FixedWindow, SlidingWindowCounter:
	case GCRA:
		switch {
		case burst <= 0:
			return fmt.Errorf("%w: GCRA needs a burst of at least 1, got %d", ErrInvalidPolicy, burst)
		case burst > MaxLimit:
			return fmt.Errorf("%w: burst %d is over MaxLimit (%d)", ErrInvalidPolicy, burst, MaxLimit)
		case burst > MaxGCRAUnits/algorithm.NewRate(limit, window.Microseconds(), burst).Unit:
			return fmt.Errorf("%w: a burst of %d at %d per %v is too long a queue to compute exactly: lower the burst, or make the window a multiple of the limit in microseconds", ErrInvalidPolicy, burst, limit, window)
		}
		return nil
	default:
		return fmt.Errorf("%w: unknown algorithm %v", ErrInvalidPolicy, alg)
	}
	if burst != 0 {
		return fmt.Errorf("%w: burst %d: only GCRA has a burst", ErrInvalidPolicy, burst)
	}
	return nil
}

// Algorithm is the algorithm the rule decides under.
func (r *Rule) Algorithm() Algorithm { return r.alg }

// Rate is the policy in the algorithms' units: Limit per Window µs (and
// GCRA's Burst, Unit and Drain).
func (r *Rule) Rate() algorithm.Rate { return r.rate }

// Limit is the policy's limit (GCRA: its rate, per window).
func (r *Rule) Limit() int64 { return r.rate.Limit }

// Window is the policy's window, µs.
func (r *Rule) Window() int64 { return r.rate.Window }

// Burst is GCRA's burst; 0 for the window algorithms.
func (r *Rule) Burst() int64 { return r.rate.Burst }

// MaxCost is the largest cost a request may have: the limit, or GCRA's
// burst. A Decision's Limit is MaxCost.
func (r *Rule) MaxCost() int64 { return r.maxCost }

// Retain is how long, µs, a store keeps a key's state after each write at
// the least: the Limiter's retention, at least the window. A later rule
// with a window up to it must still find the history.
func (r *Rule) Retain() int64 { return r.retain }

// Prefix is the namespace of the keys decided under the rule: keys under
// different prefixes never share state.
func (r *Rule) Prefix() string { return r.prefix }

// Block is the rule's penalty box, µs (0: none): a key whose Take is
// denied, or whose Charge does not fit, is blocked for Block, every
// decision of its state a denial until then (see Store).
func (r *Rule) Block() int64 { return r.block }

// WithBlock is the rule with a penalty box of d (see Block): a new rule,
// r unchanged. d is in [0, MaxWindow] (ErrInvalidPolicy); an InFlight rule
// has none.
func (r *Rule) WithBlock(d time.Duration) (*Rule, error) {
	switch {
	case d < 0 || d > MaxWindow:
		return nil, fmt.Errorf("%w: a block of %v is not in [0, MaxWindow]", ErrInvalidPolicy, d)
	case d > 0 && r.alg == InFlight:
		return nil, fmt.Errorf("%w: permits have no block", ErrInvalidPolicy)
	}
	return &Rule{rate: r.rate, maxCost: r.maxCost, retain: r.retain, prefix: r.prefix, alg: r.alg, block: d.Microseconds()}, nil
}

// WithLimit is the rule with limit and burst in place of its own, all else
// kept (the window, the retention, the prefix, the algorithm, the penalty
// box): a new rule, r unchanged, checked as NewRule checks (a share of a
// limit: package guard's local mode).
func (r *Rule) WithLimit(limit, burst int64) (*Rule, error) {
	n, err := NewRule(r.alg, limit, time.Duration(r.Window())*time.Microsecond, burst, time.Duration(r.retain)*time.Microsecond, r.prefix)
	if err != nil {
		return nil, err
	}
	n.block = r.block
	return n, nil
}

// Own is what build made of the rule for the owner k, made on first use
// and kept with the rule, so that a store derives its own arguments (a
// script's, a prefix's hash) once per rule, not once per decision. It is
// for this module's stores: k's type is internal (a nil k keeps nothing).
// Safe for concurrent use; build may run more than once when callers race,
// and every caller gets the value kept.
func (r *Rule) Own(k *owner.Key, build func(*Rule) any) any {
	if v, ok := r.own.First(k); ok {
		return v
	}
	return r.own2(k, build)
}

// Owned is k's value if it was the first to Own one: a comparison, where it
// is called (for a store's hot path; Own finds the rest).
func (r *Rule) Owned(k *owner.Key) (any, bool) { return r.own.First(k) }

// own2 is Own past the first owner.
func (r *Rule) own2(k *owner.Key, build func(*Rule) any) any {
	if v, ok := r.own.Get(k); ok {
		return v
	}
	return r.own.Put(k, build(r))
}

// String formats the rule as "100 per 60000000µs (sliding)".
func (r *Rule) String() string {
	block := ""
	if r.block > 0 {
		block = fmt.Sprintf(", blocking %dµs", r.block)
	}
	if r.alg == GCRA {
		return fmt.Sprintf("%d per %dµs, burst %d (%v)%s", r.rate.Limit, r.rate.Window, r.rate.Burst, r.alg, block)
	}
	return fmt.Sprintf("%d per %dµs (%v)%s", r.rate.Limit, r.rate.Window, r.alg, block)
}
