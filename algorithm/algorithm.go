// Package algorithm is the math of the algorithms over integers, in pure Go:
// the state the memory store keeps per key, for any backend that decides in
// Go. It imports nothing of this module: a policy reaches it as a Rate
// (NewRate), a decision leaves it as an Outcome. The reference model that
// every backend is checked against lives with the specification, in package
// conformance, and shares no code with it.
//
// All times are int64 microseconds since the Unix epoch, the resolution every
// store works at (Redis' TIME has it), so that all backends decide alike.
// Every quantity stays below 2^53 within the bounds of a ratelimit.Policy, so
// the Lua scripts, whose numbers are doubles, compute exactly the same.
//
// The rules, shared by every store and written out once more in the Lua
// scripts of the network backends:
//
//   - A key's time: every state holds the time it was last decided at, or
//     one it cannot be before: the Log its newest entry's, Fixed and
//     SlidingCounter their window's start, a non-empty Bucket the time of
//     its level. A request whose now is before that time by at most
//     MaxSkew is decided at that time instead (its outcome's At): a key's
//     time never goes back, so instances whose clocks are skewed by up to
//     MaxSkew share one timeline per key, the latest clock's, and no
//     instance's view of the state is older than another's. (Re-timing
//     such state to the earlier clock let each alternation of two skewed
//     instances give the skew away: without bound.)
//   - State from the future: state written at a time later than now by
//     more than MaxSkew (a clock that stepped back, not a skew) is treated
//     as written at now, and a Take rewrites it so. No state therefore
//     holds quota for more than one window (GCRA: one burst) after such a
//     step; a smaller step holds a key at its time for the step at most.
//   - Sliding window (Log): an admitted request of cost n is one entry (t, n).
//     An entry is in the window at now while t > now-window; a Take first
//     re-times entries later than now to now, then prunes those at or before
//     now-window (a peek does neither). The count is the sum of the costs in
//     the window. A request of cost n is admitted iff n <= limit-count, and
//     is then recorded at now. ResetAt is the oldest entry's time (at most
//     now) + window (now if none). A denial's RetryAfter is the time until
//     the entry holding the k-th oldest unit leaves, k = count+n-limit.
//   - Fixed window (Fixed): the window containing now starts at now -
//     now%window. The stored (start, count) is replaced by (that start, 0)
//     when that start is later than the stored one; a request that comes late
//     (its window starts earlier) counts in the stored window, so the count
//     never goes back; a stored window starting after now moves to now's,
//     count and all. Admitted iff n <= limit-count. ResetAt is when the next
//     aligned window starts (start+window, unless the window's length
//     changed since start), and a denial's RetryAfter is ResetAt-now.
//   - Sliding window counter (SlidingCounter): fixed windows as above, with
//     the previous window's count p kept: when now is in the window after the
//     stored one, the current count becomes p and the new count starts at 0;
//     later than that, both are 0. With e = now-start, the previous window
//     still covered is k = ceil((window-e)*1000/window) thousandths, and the
//     count is ceil(p*k/1000) + current: both rounded up, so rounding never
//     admits more. Admitted iff n <= limit-count.
//     RetryAfter is exact: the first time the request fits, should nothing
//     else be admitted; ResetAt is the first time the count drops.
//   - GCRA (Bucket): in exact units where a request weighs u = window/g and
//     a microsecond drains d = limit/g (g = gcd(window, limit)), the state is
//     the level of the bucket at a time. It drains by d per µs down to 0; a
//     request of cost n is admitted iff level + n*u <= burst*u. The count is
//     ceil(level/u): the requests' worth of quota in use. A denial's
//     RetryAfter is the time until the level is low enough; ResetAt is when
//     the count next drops. A level L written under another rate (unit u0,
//     the policy changed) is read, as written, as ceil(L/u0) requests,
//     rounded up to whole requests, at most the new burst: that many times
//     the new u; it then drains at the new d from the time it was written.
//     (Not ceil(L*u/u0) nor its floor: a level of 1.5 requests' worth is 2
//     requests under the new rate, never 1.5.)
//   - A peek decides as a Take of the same cost would and changes nothing:
//     its Count is the quota in use now, without the peeked request (which
//     is not recorded), and Allowed says whether a Take would admit it.
//   - A refund of n gives back n of the quota in use, and is refused (false)
//     beyond it: the Log drops the newest units, the windows lower the
//     current count (the counter then the previous one), GCRA lowers the
//     level by n*u (to 0 at most).
//   - A charge of n (Charge: usage known only afterwards, as tokens) is
//     recorded as an admission of cost n would be, past the limit if need
//     be, and later requests are denied until that usage has left the
//     window or drained, as if it had been admitted. Its Outcome is what a
//     peek of cost 1 says afterwards, but for RetryAfter, 0 when the charge
//     fit in the quota: Allowed says whether it did. Any window of length W
//     thus holds at most Limit, plus the last charge that crossed it.
//   - The debt a charge leaves is bounded, so that no stored number leaves
//     its bounds: a window's count passes its limit by MaxCharge at most; a
//     bucket's level passes its burst by at most what drains in MaxDebt,
//     and stays at most MaxStored; a Log keeps at most Limit+1 units, the
//     newest (the oldest are dropped: no decision of a cost of at least 1
//     under that limit or a lower one differs, as the window holds more
//     than Limit units for as long as the dropped ones would have counted;
//     a higher limit set later sees Limit+1 units of it). A Count past the
//     limit says the key is over it, whatever the algorithm.
//   - Undo gives back up to n of the admission recorded at a time (its
//     Outcome's At): the Log drops that admission's units, not the newest;
//     a window gives them back while the window they were counted in still
//     counts (the current one; for the counter the previous one too, where
//     they weigh less); GCRA lowers the level by n*u, as a refund. What has
//     left the window or drained is not given back twice; Undo is never
//     refused.
//
// # Saved state
//
// Every state saves itself as bytes (encoding.BinaryMarshaler) and loads
// itself back (encoding.BinaryUnmarshaler), so that a backend that decides
// in Go on another store (a SQL row, a key-value server) keeps the exact
// state between decisions: load, decide, save, in one transaction. A state
// loaded decides exactly as the one saved would have. How long it must be
// kept is its Life (at least), past which it holds nothing that counts.
//
// The format, for a tool or a stored procedure that shares rows with Go
// instances: one version byte (1), then integers, each a zigzag varint
// (encoding/binary.AppendVarint); times are µs since the Unix epoch.
//
//   - Fixed: started (0 or 1), the window's start, its count, the window
//     length the start is aligned to (0: none known).
//   - SlidingCounter: started (0 or 1), the current window's start, the
//     previous window's count, the current window's count.
//   - Bucket: the time of the level, the level (in units), the unit a
//     request weighed and the drain per µs when it was written (0 and 0
//     for an empty bucket).
//   - Log: the number of entries, then per entry, oldest first, its time
//     (the first in full, each other from the one before: never negative)
//     and its cost (at least 1).
//
// Compatibility: a release reads the bytes every earlier release wrote. A
// change of format takes a new version byte, and the readers of the
// earlier versions stay; bytes of a version a release does not know are
// ErrBadState to it (no state: decided as a fresh key). TestTheSavedBytes
// pins the bytes of version 1.
package algorithm

// MaxSkew is how far, µs, a request's time may be behind a key's and still
// be decided at the key's time (see the package rules): the largest skew
// between the clocks of instances sharing a store that the algorithms
// keep exact. Beyond it, a clock is taken as stepped back.
const MaxSkew = 10_000_000

// keyTime is the time a request at now is decided at on a state whose time
// is at (see the package rules): at when now is behind it by at most
// MaxSkew, else now.
func keyTime(now, at int64) int64 {
	if at > now && at-now <= MaxSkew {
		return at
	}
	return now
}

// Outcome is a decision in microseconds, as a store computes it and its
// caller reads it (package backend's Outcome is this type). What the
// decision did to the state, which only the store that keeps it reads, is
// an Effect.
//
// It is four words, no more: a value of at most four fields and 32 bytes
// is returned and passed in registers, from a store's Take to the user's
// Decision, where a larger one is stored field by field and copied back
// whole, a copy that stalls on each of those fields (docs/figures.md
// measures a tenth of a decision).
type Outcome struct {
	// Count and ResetAt are those of a ratelimit.Decision, in µs.
	Count   int64
	ResetAt int64 // µs since the Unix epoch
	// RetryAfter is 0 when the request is admitted; a denial's is at least
	// 1µs: the time until the same request would be, should nothing else
	// be. It is what says a decision is a denial (see Allowed).
	RetryAfter int64
	At         int64 // µs since the Unix epoch: the decision's time
}

// Allowed reports whether the request was admitted (a peek's: whether it
// would be): a decision (At is a time, never 0) with no RetryAfter. The
// zero Outcome, which a store returns beside an error, admits nothing.
func (o Outcome) Allowed() bool { return o.RetryAfter == 0 && o.At != 0 }

// set writes every field of o, one store each (see Outcome): the
// decision of an admission, until deny says otherwise.
func (o *Outcome) set(count, resetAt, at int64) {
	o.Count, o.ResetAt, o.RetryAfter, o.At = count, resetAt, 0, at
}

// deny makes o a denial whose request fits after retryAfter µs, at least
// 1µs however the algorithm rounded: a denial is never read as admitted.
func (o *Outcome) deny(retryAfter int64) { o.RetryAfter = max(retryAfter, 1) }

// Effect is what a decision did to the state, for the store that keeps it.
type Effect struct {
	// Life is set when the decision wrote the state (an admission, a
	// refund): how long after the Outcome's At the state still counts. A
	// store keeps it at least that long, and at least its retention; 0
	// leaves the time it is kept as it was.
	Life int64
	// Changed reports whether the decision changed the state: an
	// admission, a refund, a Take that re-timed state from the future or
	// (a Log) pruned what left the window. A store that saves state (a
	// row, a key) writes it back only when Changed; a state not Changed
	// saves to the same bytes. Peek never changes it.
	Changed bool
}

// Rate is a policy in the units the algorithms compute in.
type Rate struct {
	Limit  int64 // requests per window (GCRA: the rate's, per window)
	Window int64 // µs
	Burst  int64 // GCRA: the requests the bucket holds
	Unit   int64 // GCRA: what a request weighs
	Drain  int64 // GCRA: what a µs drains
}

// NewRate is a policy of limit per window (µs) in the algorithms' units;
// burst is GCRA's (0 for the window algorithms, which have none).
func NewRate(limit, window, burst int64) Rate {
	r := Rate{Limit: limit, Window: window, Burst: burst}
	if burst > 0 {
		g := gcd(r.Window, r.Limit)
		r.Unit, r.Drain = r.Window/g, r.Limit/g
	}
	return r
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// ceilDiv is ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 {
	if b == 1 { // GCRA's drain, for a limit that divides the window: no division
		return a
	}
	return (a + b - 1) / b
}

// WindowStart is the start of the fixed window of length window holding now.
func WindowStart(now, window int64) int64 {
	r := now % window
	if r < 0 {
		r += window
	}
	return now - r
}
