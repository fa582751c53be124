package conformance

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// Scenarios at the edges of what users meet: limits at their bounds, clocks
// that step, policies that change under history, refunds, a policy per key.

// boundPolicy is the scenario's algorithm at the largest limit it accepts.
func (e *env) boundPolicy() ratelimit.Policy {
	switch e.alg {
	case ratelimit.SlidingWindow:
		return ratelimit.Policy{Limit: ratelimit.MaxLogLimit, Window: time.Hour}
	case ratelimit.GCRA: // a whole number of µs per request keeps the burst's exact units within bounds
		return ratelimit.TokenBucket(ratelimit.MaxLimit, 4*ratelimit.MaxLimit*time.Microsecond, ratelimit.MaxLimit)
	}
	return ratelimit.Policy{Limit: ratelimit.MaxLimit, Window: time.Hour, Algorithm: e.alg}
}

// atTheBounds: a count plus a cost must not wrap around (int64 on a memory
// store, doubles exact to 2^53 in Lua), so a request of the largest cost on
// top of one admitted request is denied, and the key stays denied once full.
func atTheBounds(t *testing.T, e *env) {
	p := e.boundPolicy()
	max := p.MaxCost()
	e.clock = NewManualClock(start())
	s := e.newStore(t)
	l, err := ratelimit.New(s, p, ratelimit.WithPrefix(e.namespace()), ratelimit.WithCallerClock(e.clock.Now),
		ratelimit.WithTimeout(budget), ratelimit.WithRetention(ratelimit.MaxWindow))
	mustNoError(t, err)
	c := e.checkerOn(s, l)
	mustTrue(t, c.allowN("user", 1).Allowed)
	d := c.allowN("user", max)
	mustFalse(t, d.Allowed, "1 + %d is over %d", max, max)
	mustEqual(t, 1, d.Count)
	d = c.allowN("user", max-1)
	mustTrue(t, d.Allowed)
	mustEqual(t, max, d.Count)
	for i := 0; i < 20; i++ {
		d = c.allowN("user", 1+i%3)
		mustFalse(t, d.Allowed, "a full key stays denied")
		mustEqual(t, max, d.Count)
	}

	over := p
	if e.alg == ratelimit.GCRA {
		over.Burst++
	} else {
		over.Limit++
	}
	mustErrorIs(t, l.SetPolicy(over), ratelimit.ErrInvalidPolicy, "one over the bound")
	mustErrorIs(t, l.SetPolicy(ratelimit.Policy{Limit: 10, Window: longest(e.alg) + time.Microsecond, Algorithm: p.Algorithm, Burst: p.Burst}),
		ratelimit.ErrInvalidPolicy, "a window over the longest")
	_, err = l.AllowN(context.Background(), "user", max+1)
	mustErrorIs(t, err, ratelimit.ErrInvalidCost)
}

// longest is the longest window of alg: MaxWindow, a fixed window's
// MaxFixedWindow.
func longest(alg ratelimit.Algorithm) time.Duration {
	if alg == ratelimit.FixedWindow {
		return ratelimit.MaxFixedWindow
	}
	return ratelimit.MaxWindow
}

// aYearLongFixedWindow: a fixed window may be as long as MaxFixedWindow (a
// year, envoyproxy/ratelimit's longest unit), its state kept for all of it.
func aYearLongFixedWindow(t *testing.T, e *env) {
	if e.alg != ratelimit.FixedWindow {
		t.Skip("a window past MaxWindow is a fixed window's only")
	}
	const year = 365 * 24 * time.Hour
	c := e.checked(2, year)
	now := c.clock.Now().UnixMicro()
	start := time.UnixMicro(now - now%year.Microseconds()).Add(year) // windows align to the Unix epoch
	c.clock.Advance(start.Add(time.Hour).Sub(c.clock.Now()))
	mustTrue(t, c.allow("user").Allowed)
	c.clock.Advance(200 * 24 * time.Hour) // past MaxWindow: the count is still held
	d := c.allow("user")
	mustTrue(t, d.Allowed)
	mustEqual(t, 2, d.Count)
	d = c.allow("user")
	mustFalse(t, d.Allowed, "2 a year")
	mustTrue(t, d.ResetAt.Equal(start.Add(year)), "reset at the year's end, not %v", d.ResetAt)
	c.clock.Advance(start.Add(year).Sub(c.clock.Now()))
	mustTrue(t, c.allow("user").Allowed, "the next year")
}

// clockStepsBack: a clock that jumps an hour ahead and comes back leaves
// state "in the future", by more than backend.MaxSkew. It is treated as
// made now, so the key is denied for at most about one window (the counter:
// until its count has slid out of the next window), not for the hour.
func clockStepsBack(t *testing.T, e *env) {
	const window = time.Second
	c := e.checked(5, window)
	c.clock.Advance(time.Hour)
	for i := 0; i < 5; i++ {
		mustTrue(t, c.allow("user").Allowed)
	}
	c.clock.Advance(-time.Hour)
	d := c.allow("user")
	mustFalse(t, d.Allowed, "the 5 requests made an hour ahead count now")
	longest := window
	if e.alg == ratelimit.SlidingWindowCounter {
		longest = 2 * window
	}
	mustLessOrEqual(t, d.RetryAfter, longest, "denied for the window, not for the hour")
	c.clock.Advance(d.RetryAfter)
	mustTrue(t, c.allow("user").Allowed, "admitted again after retry-after")
}

// skewedClocksShareOneTimeline: two instances whose clocks are skewed by
// up to backend.MaxSkew, taking turns on one key, admit what one clock
// would. The later instance's state is not re-timed to the earlier clock
// (which gave each turn the skew away: 52 to 58 times the limit at 5 s
// apart, GCRA 16 times at 20 ms); the earlier one's requests are decided
// at the key's time: every decision is made at a time between the real
// clock's and the later clock's, and the admissions hold to the policy on
// those times. (On real time, that is at most what the policy admits over
// an interval one skew longer.)
func skewedClocksShareOneTimeline(t *testing.T, e *env) {
	for _, skew := range []time.Duration{20 * time.Millisecond, 5 * time.Second} {
		const limit, window, step = 20, time.Second, 5 * time.Millisecond
		real := NewManualClock(start())
		ahead := NewManualClock(real.Now().Add(skew))
		e.clock = real
		behind := e.limiter(limit, window)
		l, err := ratelimit.New(e.newStore(t), e.policy(limit, window), ratelimit.WithPrefix(e.namespace()),
			ratelimit.WithCallerClock(ahead.Now), ratelimit.WithTimeout(budget), ratelimit.WithRetention(retention))
		mustNoError(t, err)
		key := "skewed-" + skew.String()
		var admitted []int64
		for i := 0; i < int(3*window/step); i++ {
			for _, li := range []*ratelimit.Limiter{l, behind} {
				d, err := li.Allow(context.Background(), key)
				mustNoError(t, err)
				if d.At.Before(real.Now()) || d.At.After(ahead.Now()) {
					t.Fatalf("%v apart: decided at %v, outside [the real clock's %v, the later clock's %v]", skew, d.At, real.Now(), ahead.Now())
				}
				if d.Allowed {
					admitted = append(admitted, d.At.UnixMicro())
				}
			}
			real.Advance(step)
			ahead.Advance(step)
		}
		mustZero(t, OverAdmissions(admitted, e.policy(limit, window)),
			"two instances %v apart, taking turns: %d admitted in %v at %d per %v", skew, len(admitted), 3*window, limit, window)
	}
}

// longerWindowKeepsHistory: a window lengthened within the Limiter's
// retention counts what was recorded under the shorter one; one beyond it
// is accepted and counts what it records. (That the state
// also outlives a server's TTL or a sweeper is checked in real time by the
// backends' own tests.)
func longerWindowKeepsHistory(t *testing.T, e *env) {
	c := e.checked(5, 500*time.Millisecond, ratelimit.WithRetention(10*time.Second))
	for i := 0; i < 5; i++ {
		mustTrue(t, c.allow("user").Allowed)
	}
	c.setPolicy(e.policy(5, 10*time.Second))
	c.clock.Advance(2 * time.Second)
	d := c.allow("user")
	if e.alg == ratelimit.GCRA {
		mustEqual(t, 5, d.Count, "the bucket drained one of 5 in 2s at 5 per 10s, and took one more")
	} else {
		mustFalse(t, d.Allowed, "the 5 requests of 2s ago are in the 10s window")
		mustEqual(t, 5, d.Count)
	}

	// Beyond the retention, with no foresight: accepted, and what it then
	// records is kept for its own window.
	short := e.checked(5, 500*time.Millisecond, ratelimit.WithRetention(500*time.Millisecond))
	short.setPolicy(e.policy(5, 10*time.Second))
	for i := 0; i < 5; i++ {
		mustTrue(t, short.allow("another").Allowed)
	}
	short.clock.Advance(2 * time.Second)
	d = short.allow("another")
	if e.alg == ratelimit.GCRA {
		mustEqual(t, 5, d.Count, "the bucket drained one of 5 in 2s at 5 per 10s, and took one more")
	} else {
		mustFalse(t, d.Allowed, "the 5 requests of 2s ago are in the 10s window")
	}
}

// refunds: a refund gives back what it names, is refused beyond what is in
// use, and a Multi refund gives back to every policy.
func refunds(t *testing.T, e *env) {
	if !e.refunds(e.newStore(t)) {
		t.Skip("the store does not refund (its Refund is unsupported)")
	}
	c := e.checked(5, time.Second)
	c.allowN("user", 3)
	d, ok := c.refund("user", 2)
	mustTrue(t, ok)
	mustEqual(t, 1, d.Count, "3 taken, 2 given back")
	_, ok = c.refund("user", 2)
	mustFalse(t, ok, "a refund of more than is in use")
	mustEqual(t, 1, c.peek("user").Count, "a refused refund changes nothing")
	d = c.allowN("user", 4)
	mustTrue(t, d.Allowed, "the refunded quota is available again")
	mustEqual(t, 5, d.Count)
	_, ok = c.refund("never-taken", 1)
	mustFalse(t, ok)
	_, err := c.l.Refund(c.ctx, "user", 0)
	mustErrorIs(t, err, ratelimit.ErrInvalidCost)
	c.clock.Advance(10 * time.Millisecond)
	c.refund("user", 5) // later, as time has freed what it has: exactly as the model

	perKey := e.limiter(2, time.Minute, ratelimit.WithPrefix(e.namespace()+"rk:"), ratelimit.WithName("per-key"))
	perTenant := e.limiter(10, time.Minute, ratelimit.WithPrefix(e.namespace()+"rt:"), ratelimit.WithName("per-tenant"))
	m, err := ratelimit.NewMulti(perKey, perTenant)
	mustNoError(t, err)
	ctx, keys := context.Background(), []string{"user", "tenant"}
	md, err := m.Allow(ctx, keys...)
	mustNoError(t, err)
	mustTrue(t, md.Allowed)
	mustNoError(t, m.RefundN(ctx, keys, 1), "the upstream failed: both policies get it back")
	for i, l := range []*ratelimit.Limiter{perKey, perTenant} {
		d, err := l.Peek(ctx, keys[i])
		mustNoError(t, err)
		mustZero(t, d.Count, "%s: refunded", l.Name())
	}
	mustErrorIs(t, m.RefundN(ctx, keys, 1), ratelimit.ErrInvalidCost, "nothing is in use any more")
}

// policyPerKey: a PolicyFunc gives each key its tier; a tier that changes
// applies at once with the key's history; bad policies record nothing.
func policyPerKey(t *testing.T, e *env) {
	var mu sync.Mutex
	tiers := map[string]ratelimit.Policy{"pro": e.policy(5, time.Minute)}
	lookupFailed := errors.New("tier lookup failed")
	l := e.limiter(2, time.Minute, ratelimit.WithPolicyFunc(func(_ context.Context, key string) (ratelimit.Policy, error) {
		mu.Lock()
		defer mu.Unlock()
		switch key {
		case "broken":
			return ratelimit.Policy{Limit: -1, Window: time.Minute}, nil
		case "too-long":
			return e.policy(5, longest(e.alg)+time.Hour), nil
		case "down":
			return ratelimit.Policy{}, lookupFailed
		}
		return tiers[key], nil // the zero Policy: the Limiter's own
	}))
	ctx := context.Background()
	allowed := func(key string, n int) int {
		got := 0
		for i := 0; i < n; i++ {
			d, err := l.Allow(ctx, key)
			mustNoError(t, err, key)
			if d.Allowed {
				got++
			}
		}
		return got
	}
	mustEqual(t, 2, allowed("free", 3), "the Limiter's policy")
	mustEqual(t, 4, allowed("pro", 4), "the pro tier")
	d, err := l.Peek(ctx, "pro")
	mustNoError(t, err)
	mustEqual(t, 5, d.Limit)
	mustEqual(t, 4, d.Count)

	mu.Lock()
	tiers["pro"] = e.policy(3, time.Minute) // downgraded at run time
	mu.Unlock()
	d, err = l.Allow(ctx, "pro")
	mustNoError(t, err)
	mustFalse(t, d.Allowed, "4 already made under a new limit of 3")
	mustEqual(t, 3, d.Limit)

	plain := e.limiter(2, time.Minute) // the same keys, without the PolicyFunc
	for _, key := range []string{"broken", "too-long", "down"} {
		_, err := l.Allow(ctx, key)
		mustErrorIs(t, err, ratelimit.ErrInvalidPolicy, key)
		d, err := plain.Peek(ctx, key)
		mustNoError(t, err)
		mustZero(t, d.Count, "%s: nothing recorded", key)
	}
	_, err = l.Allow(ctx, "down")
	mustErrorIs(t, err, lookupFailed, "the PolicyFunc's error is wrapped")
}
