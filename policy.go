package ratelimit

import (
	"fmt"
	"time"
)

// Algorithm selects how a Policy counts requests (see the package
// documentation for the model). The zero value is SlidingWindow.
type Algorithm uint8

const (
	// SlidingWindow keeps every admitted request in a log scored by time
	// and counts those in the last Window: exact, with no boundary burst.
	// It stores up to Limit entries per key.
	SlidingWindow Algorithm = iota
	// FixedWindow counts requests in windows aligned to multiples of
	// Window (since the Unix epoch); the count restarts at each boundary.
	// One counter per key, but a client can get 2*Limit requests through
	// in a short time around a boundary.
	FixedWindow
)

// Algorithms returns every algorithm a Policy may name, in the order of
// their values (a new slice each time).
func Algorithms() []Algorithm { return []Algorithm{SlidingWindow, FixedWindow} }

// String returns "sliding" or "fixed".
func (a Algorithm) String() string {
	switch a {
	case SlidingWindow:
		return "sliding"
	case FixedWindow:
		return "fixed"
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// Policy is a limit of Limit requests per Window, counted by Algorithm.
type Policy struct {
	// Limit is the number of requests admitted per window; at least 1.
	Limit int
	// Window is the length of the window; at least a millisecond. It is
	// kept to microsecond precision (the finer part is dropped).
	Window time.Duration
	// Algorithm is SlidingWindow (the zero value) or FixedWindow.
	Algorithm Algorithm
}

// PerSecond is a sliding-window policy of n requests per second.
func PerSecond(n int) Policy { return Policy{Limit: n, Window: time.Second} }

// PerMinute is a sliding-window policy of n requests per minute.
func PerMinute(n int) Policy { return Policy{Limit: n, Window: time.Minute} }

// PerHour is a sliding-window policy of n requests per hour.
func PerHour(n int) Policy { return Policy{Limit: n, Window: time.Hour} }

// Validate reports why p cannot be used, wrapping ErrInvalidPolicy, or nil.
func (p Policy) Validate() error {
	switch {
	case p.Limit <= 0:
		return fmt.Errorf("%w: limit %d is not positive", ErrInvalidPolicy, p.Limit)
	case p.Window < time.Millisecond:
		return fmt.Errorf("%w: window %v is shorter than 1ms", ErrInvalidPolicy, p.Window)
	case p.Algorithm != SlidingWindow && p.Algorithm != FixedWindow:
		return fmt.Errorf("%w: unknown algorithm %v", ErrInvalidPolicy, p.Algorithm)
	}
	return nil
}

// checkCost reports, wrapping ErrInvalidCost, a cost n the policy can never
// admit.
func (p Policy) checkCost(n int) error {
	if n < 1 || n > p.Limit {
		return fmt.Errorf("%w: n=%d, want 1 to %d", ErrInvalidCost, n, p.Limit)
	}
	return nil
}

// String formats p as "100 per 1m0s (sliding)".
func (p Policy) String() string {
	return fmt.Sprintf("%d per %v (%v)", p.Limit, p.Window, p.Algorithm)
}
