package ratelimit

import (
	"fmt"
	"time"
)

// Decision is the outcome of one request, with everything a caller needs to
// answer the client (see the RateLimit-* HTTP headers). It is always an
// answer: a call that could not decide returns an error instead.
type Decision struct {
	// Allowed reports whether the request was admitted (for Peek: whether
	// the request would be admitted now).
	Allowed bool
	// Limit is the policy's limit the decision was made under
	// (Policy.MaxCost: for GCRA, the burst).
	Limit int
	// Remaining is Limit-Count, never negative: how many more requests of
	// cost 1 the key may make now.
	Remaining int
	// Count is the quota in use after this decision (including this
	// request when it was admitted): the requests in the window; for the
	// counter, its weighted estimate; for GCRA, the requests' worth the
	// bucket holds, rounded up.
	Count int
	// ResetAt is when quota next frees: for a sliding window, when the
	// oldest request in it leaves; for a fixed window, when the window
	// ends; for the counter and GCRA, when Count next drops. It is the
	// decision time when nothing is in use.
	ResetAt time.Time
	// RetryAfter is zero when Allowed. Otherwise it is exactly how long
	// until the same request would be admitted, should nothing else be:
	// for a sliding window, until enough of the oldest requests have left
	// the window; for a fixed window, until the window ends; for the
	// counter, until enough of the previous window has slid out; for GCRA,
	// until the bucket has drained enough.
	RetryAfter time.Duration
	// At is the time the decision was made at, on the clock that made it:
	// the store's (a server's TIME, or its time as the store estimates it
	// from TIME), or the caller's with WithCallerClock.
	// An admitted request is recorded at At. ResetAt is on the same clock.
	At time.Time
	// Source says what made the decision: the store (the zero value), or
	// what stood in for a store that could not answer. Only a decision from
	// the store is exact; a fallback's counts are local, and a fail-open
	// admission carries no quota (Count, Remaining and ResetAt are zero).
	Source Source
}

// Source is what made a Decision.
type Source uint8

const (
	// SourceStore is a decision of the store: exact, and recorded when
	// admitted.
	SourceStore Source = iota
	// SourceFailOpen is an admission by a Limiter built WithFailOpen, made
	// because the store failed; nothing was recorded.
	SourceFailOpen
	// SourceFallback is a decision of a local store standing in for one
	// that failed or whose circuit breaker is open (package guard), under
	// this instance's share of the policy: approximate across instances,
	// and recorded only locally. Limit is the share.
	SourceFallback
)

// String returns "store", "fail-open" or "fallback".
func (s Source) String() string {
	switch s {
	case SourceStore:
		return "store"
	case SourceFailOpen:
		return "fail-open"
	case SourceFallback:
		return "fallback"
	}
	return fmt.Sprintf("Source(%d)", uint8(s))
}
