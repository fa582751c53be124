// Package outcome turns what a store computed (algorithm.Outcome, integers
// in microseconds) into the Decision a caller gets: the one place the
// algorithms' units meet the public types, so that package algorithm stays
// the math alone.
package outcome

import (
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/algorithm"
)

// Decision is o as the Decision of a request under a policy whose
// Decision.Limit is limit (Policy.MaxCost).
func Decision(o algorithm.Outcome, limit int) ratelimit.Decision {
	return ratelimit.Decision{
		Allowed:    o.Allowed,
		Limit:      limit,
		Remaining:  int(max(int64(limit)-o.Count, 0)),
		Count:      int(o.Count),
		ResetAt:    time.UnixMicro(o.ResetAt),
		RetryAfter: time.Duration(o.RetryAfter) * time.Microsecond,
		At:         time.UnixMicro(o.At),
	}
}

// Rate is p in the algorithms' units.
func Rate(p ratelimit.Policy) algorithm.Rate {
	burst := int64(0)
	if p.Algorithm == ratelimit.GCRA {
		burst = int64(p.Burst)
	}
	return algorithm.NewRate(int64(p.Limit), p.Window.Microseconds(), burst)
}
