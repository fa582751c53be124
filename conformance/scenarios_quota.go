package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// Scenarios about quota: admission, denial, peeks, the window passing,
// reset, reconfiguration and isolation, each decision checked against Model.

func allowsWithinLimit(t *testing.T, e *env) {
	c := e.checked(5, time.Second)
	for i := 1; i <= 5; i++ {
		d := c.allow("user")
		mustTrue(t, d.Allowed, "request %d of 5", i)
		mustEqual(t, i, d.Count, "count after request %d", i)
		mustEqual(t, 5-i, d.Remaining, "remaining after request %d", i)
		mustZero(t, d.RetryAfter, "an admitted request has no retry-after")
	}
}

func deniesAfterLimit(t *testing.T, e *env) {
	c := e.checked(3, time.Second)
	for i := 0; i < 3; i++ {
		c.allow("user")
	}
	for i := 0; i < 10; i++ {
		c.clock.Advance(time.Millisecond)
		d := c.allow("user")
		mustFalse(t, d.Allowed, "request %d over the limit of 3", 4+i)
		mustEqual(t, 3, d.Count, "a denied request must not be recorded")
		mustPositive(t, d.RetryAfter)
	}
}

func peekDoesNotConsume(t *testing.T, e *env) {
	c := e.checked(2, time.Second)
	for i := 0; i < 5; i++ {
		d := c.peek("user")
		mustEqual(t, 0, d.Count)
		mustTrue(t, d.Allowed)
	}
	c.allow("user")
	c.allow("user")
	d := c.peek("user")
	mustFalse(t, d.Allowed, "a peek at the limit says a request would be denied")
	mustEqual(t, 2, d.Count)
}

func freesQuotaAsWindowPasses(t *testing.T, e *env) {
	c := e.checked(2, time.Second)
	c.allow("user")
	c.clock.Advance(400 * time.Millisecond)
	c.allow("user")
	c.clock.Advance(599 * time.Millisecond)
	d := c.allow("user")
	switch e.alg {
	case ratelimit.SlidingWindow, ratelimit.FixedWindow:
		mustFalse(t, d.Allowed, "1ms before the first request leaves")
		mustEqual(t, time.Millisecond, d.RetryAfter)
		c.clock.Advance(time.Millisecond)
		d = c.allow("user")
		mustTrue(t, d.Allowed, "the first request has left the window (or the fixed window ended)")
	case ratelimit.SlidingWindowCounter:
		mustFalse(t, d.Allowed, "2 in this window")
		mustEqual(t, 501*time.Millisecond, d.RetryAfter, "the next window, once half of this one's 2 has slid out")
	case ratelimit.GCRA:
		mustTrue(t, d.Allowed, "999ms have drained almost 2 requests' worth")
	}
	c.clock.Advance(3 * time.Second)
	d = c.peek("user")
	mustEqual(t, 0, d.Count, "everything has left after a long pause")
	mustEqual(t, 2, d.Remaining)
}

func boundaryBurst(t *testing.T, e *env) {
	c := e.checked(5, time.Second)
	c.clock.Advance(900 * time.Millisecond) // 100ms before a fixed boundary
	for i := 0; i < 5; i++ {
		mustTrue(t, c.allow("user").Allowed)
	}
	c.clock.Advance(200 * time.Millisecond) // 100ms after it
	admitted := 0
	for i := 0; i < 5; i++ {
		if c.allow("user").Allowed {
			admitted++
		}
	}
	switch e.alg {
	case ratelimit.FixedWindow:
		mustEqual(t, 5, admitted, "a fixed window starts afresh at the boundary: 10 requests in 200ms")
	case ratelimit.GCRA:
		mustEqual(t, 1, admitted, "200ms at 5 per second drain one request's worth")
	default:
		mustEqual(t, 0, admitted, "a sliding window (or the counter's estimate) still holds the 5 requests of 200ms ago")
	}
}

func remainingNeverNegative(t *testing.T, e *env) {
	c := e.checked(4, time.Second)
	for i := 0; i < 8; i++ {
		d := c.allow("user")
		mustEqual(t, max(0, 4-(i+1)), d.Remaining, "after request %d", i+1)
	}
	c.setPolicy(e.policy(2, time.Second))
	d := c.peek("user")
	if e.alg == ratelimit.GCRA {
		mustEqual(t, 2, d.Count, "a bucket under a new rate holds as many requests, at most a burst")
	} else {
		mustEqual(t, 4, d.Count, "the history is kept across a policy change")
	}
	mustEqual(t, 0, d.Remaining, "4 requests under a limit of 2: remaining is 0, not -2")
}

func resetRestoresQuota(t *testing.T, e *env) {
	c := e.checked(3, time.Minute)
	for i := 0; i < 4; i++ {
		c.allow("user")
	}
	c.reset("user")
	d := c.peek("user")
	mustEqual(t, 3, d.Remaining)
	for i := 0; i < 3; i++ {
		mustTrue(t, c.allow("user").Allowed, "request %d after reset", i+1)
	}
	mustFalse(t, c.allow("user").Allowed)
	c.reset("never-seen") // resetting an unknown key is fine
}

func reconfigureAppliesToExistingKeys(t *testing.T, e *env) {
	c := e.checked(5, time.Second)
	for i := 0; i < 3; i++ {
		c.allow("user")
	}
	c.setPolicy(e.policy(2, time.Second))
	d := c.allow("user")
	mustFalse(t, d.Allowed, "3 requests already made under a new limit of 2")
	mustEqual(t, 2, d.Limit)
	c.setPolicy(e.policy(10, time.Second))
	d = c.allow("user")
	mustTrue(t, d.Allowed)
	mustEqual(t, 4, d.Count, "the new limit counts the requests made under the old one")
	mustEqual(t, 6, d.Remaining)
	mustError(t, c.l.SetPolicy(e.policy(0, time.Second)))
	mustEqual(t, 10, c.l.Policy().Limit, "an invalid policy changes nothing")
}

func keysAreIsolated(t *testing.T, e *env) {
	c := e.checked(2, time.Minute)
	// Keys that a careless naming scheme would map to one server key.
	keys := []string{"user", "user2", "{user}", "%7Buser%7D", "a}b", "a%7Db", "with space", "nul\x00byte", "\xff\xfe"}
	for _, k := range keys {
		c.allow(k)
		c.allow(k)
		mustFalse(t, c.allow(k).Allowed, "key %q at its limit", k)
	}
	for _, k := range keys {
		mustEqual(t, 2, c.peek(k).Count, "key %q holds only its own requests", k)
	}

	// Prefixes that a careless naming scheme would turn into hash tags, or
	// map onto each other.
	for _, prefix := range []string{"x{}:", "{p}:", "%7Bp%7D:", "p{", "}"} {
		l := e.limiter(2, time.Minute, ratelimit.WithPrefix(e.namespace()+prefix))
		for i := 1; i <= 3; i++ {
			d, err := l.Allow(context.Background(), "{user}")
			mustNoError(t, err, "prefix %q", prefix)
			mustEqual(t, min(i, 2), d.Count, "prefix %q holds only its own requests", prefix)
		}
	}

	// The same key under another prefix, or the other algorithm, is another user.
	other := e.limiter(2, time.Minute, ratelimit.WithPrefix(e.namespace()+"other:"))
	d, err := other.Allow(context.Background(), "user")
	mustNoError(t, err)
	mustEqual(t, 1, d.Count, "another prefix")
	for _, alg := range e.algorithms {
		if alg == e.alg {
			continue
		}
		l, err := ratelimit.New(e.newStore(t), policyOf(alg, 2, time.Minute),
			ratelimit.WithPrefix(e.namespace()), ratelimit.WithCallerClock(e.clock.Now), ratelimit.WithTimeout(budget))
		mustNoError(t, err)
		d, err = l.Allow(context.Background(), "user")
		mustNoError(t, err)
		mustTrue(t, d.Allowed, "%v keeps its own state for the same key", alg)
		mustEqual(t, 1, d.Count, "%v", alg)
	}
}

func allowNConsumesCost(t *testing.T, e *env) {
	c := e.checked(10, time.Second)
	mustEqual(t, 4, c.allowN("user", 4).Count)
	if e.alg != ratelimit.GCRA { // where 100ms would drain one request's worth
		c.clock.Advance(100 * time.Millisecond)
	}
	d := c.allowN("user", 7)
	mustFalse(t, d.Allowed, "4+7 > 10")
	mustEqual(t, 4, d.Count, "a denied AllowN records nothing")
	d = c.allowN("user", 6)
	mustTrue(t, d.Allowed)
	mustEqual(t, 10, d.Count)
	mustEqual(t, 0, d.Remaining)
	d = c.allowN("user", 10)
	mustFalse(t, d.Allowed)
}

func retryAfterIsExact(t *testing.T, e *env) {
	c := e.checked(3, time.Second)
	var d, d2 ratelimit.Decision
	switch e.alg {
	case ratelimit.SlidingWindow, ratelimit.FixedWindow, ratelimit.SlidingWindowCounter:
		c.allow("user") // t=0
		c.clock.Advance(300 * time.Millisecond)
		c.allow("user") // t=300ms
		c.clock.Advance(300 * time.Millisecond)
		c.allow("user") // t=600ms
		c.clock.Advance(100 * time.Millisecond)
		d = c.allow("user") // t=700ms
		d2 = c.allowN("user", 2)
	case ratelimit.GCRA: // spaced requests would all fit: a burst first
		c.allowN("user", 3)
		c.clock.Advance(100 * time.Millisecond)
		d = c.allow("user")
		d2 = c.allowN("user", 2)
	}
	mustFalse(t, d.Allowed)
	switch e.alg {
	case ratelimit.SlidingWindow:
		mustEqual(t, 300*time.Millisecond, d.RetryAfter, "the oldest (t=0) leaves at 1s")
		mustEqual(t, 600*time.Millisecond, d2.RetryAfter, "a cost of 2 waits for the second oldest (t=300ms), leaving at 1.3s")
	case ratelimit.FixedWindow:
		mustEqual(t, 300*time.Millisecond, d.RetryAfter, "the fixed window ends at 1s")
		mustEqual(t, 300*time.Millisecond, d2.RetryAfter)
	case ratelimit.SlidingWindowCounter:
		mustEqual(t, 634*time.Millisecond, d.RetryAfter, "in the next window, once ceil(3*k/1000) <= 2: k <= 666, 334ms in")
		mustEqual(t, 967*time.Millisecond, d2.RetryAfter, "cost 2: k <= 333, 667ms in")
	case ratelimit.GCRA:
		mustEqual(t, 233334*time.Microsecond, d.RetryAfter, "one interval (333333.3µs) drains from full, 100ms of it already, rounded up")
		mustEqual(t, 566667*time.Microsecond, d2.RetryAfter, "two intervals")
	}
	mustEqual(t, c.clock.Now().Add(d.RetryAfter), d.ResetAt, "quota next frees when the request would fit")
	c.clock.Advance(d.RetryAfter - time.Microsecond)
	mustFalse(t, c.allow("user").Allowed, "1µs before retry-after")
	c.clock.Advance(time.Microsecond)
	mustTrue(t, c.allow("user").Allowed, "at retry-after")
}

func sameMicrosecond(t *testing.T, e *env) {
	const limit = 200
	c := e.checked(limit, time.Second)
	for i := 0; i < limit; i++ {
		mustTrue(t, c.allow("user").Allowed, "request %d at one instant", i+1)
	}
	d := c.allow("user")
	mustFalse(t, d.Allowed, "every request at one instant was counted")
	mustEqual(t, limit, d.Count)
	c.clock.Advance(time.Second)
	if e.alg == ratelimit.SlidingWindowCounter {
		c.clock.Advance(time.Second) // the previous window's count weighs through the next
	}
	mustEqual(t, limit, c.allowN("user", limit).Count, "all left together")
}
