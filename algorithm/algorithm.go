// Package algorithm is the math of the algorithms, in pure Go: the
// sliding-window Log and the fixed-window Counter that the memory store keeps
// per key, for any backend that decides in Go. The reference model that every
// backend is checked against lives with the specification, in package
// conformance.
//
// All times are int64 microseconds since the Unix epoch, the resolution every
// store works at (Redis' TIME has it), so that all backends decide alike.
//
// The rules, shared by every store and written out once more in the Lua
// scripts of the network backends:
//
//   - Sliding window: an entry recorded at t is in the window at now while
//     t > now-window; it leaves at t+window. Entries at or before now-window
//     are pruned on every Take (never on a peek). A request of cost n is
//     admitted iff count+n <= limit, and then n entries at now are recorded.
//     ResetAt is the oldest entry's time + window (now if the log is empty).
//     A denial's RetryAfter is the time until the k-th oldest entry leaves,
//     k = count+n-limit: exactly when the request would fit.
//   - Fixed window: the window containing now starts at now - now%window.
//     The stored (start, count) is replaced by (that start, 0) when that
//     start is later than the stored one; a request that comes late (its
//     window starts earlier) counts in the stored window, so the count never
//     goes back. Admitted iff count+n <= limit. ResetAt is start+window, and
//     a denial's RetryAfter is ResetAt-now.
//   - A peek decides as a Take of the same cost would and changes nothing
//     (it does not even prune).
package algorithm

import (
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// Outcome is a decision in microseconds, as a store computes it.
type Outcome struct {
	// Allowed, Count, ResetAt and RetryAfter are those of
	// ratelimit.Decision.
	Allowed    bool
	Count      int
	ResetAt    int64 // µs since the Unix epoch
	RetryAfter int64 // µs; 0 when allowed
	At         int64 // µs since the Unix epoch: the decision's time
}

// Decision converts o to the Decision of a request under limit.
func (o Outcome) Decision(limit int) ratelimit.Decision {
	remaining := limit - o.Count
	if remaining < 0 {
		remaining = 0
	}
	return ratelimit.Decision{
		Allowed:    o.Allowed,
		Limit:      limit,
		Remaining:  remaining,
		Count:      o.Count,
		ResetAt:    time.UnixMicro(o.ResetAt),
		RetryAfter: time.Duration(o.RetryAfter) * time.Microsecond,
		At:         time.UnixMicro(o.At),
	}
}

// Micros is t in microseconds since the Unix epoch.
func Micros(t time.Time) int64 { return t.UnixMicro() }

// WindowMicros is the policy's window in microseconds.
func WindowMicros(p ratelimit.Policy) int64 { return p.Window.Microseconds() }

// WindowStart is the start of the fixed window of length window holding now.
func WindowStart(now, window int64) int64 {
	r := now % window
	if r < 0 {
		r += window
	}
	return now - r
}
