package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
)

// Usage known only afterwards: charges past the limit, checks that take
// nothing, and undoing the admission a request named.

// charges reports whether s records charges (its Charge is supported).
func (e *env) charges(s backend.Store) bool {
	_, err := s.Charge(context.Background(), e.request("charges-probe:", "probe", e.policy(1, time.Minute), 1))
	return supported(err)
}

// charge calls Charge (or the store's) and requires the model's answer.
func (c *checker) charge(key string, n int) ratelimit.Decision {
	c.t.Helper()
	req := c.request(key, n)
	return c.decide(fmt.Sprintf("Charge(%q, %d)", key, n), req, c.model.Charge(req),
		func() (backend.Outcome, error) { return c.store.Charge(c.ctx, req) },
		func() (ratelimit.Decision, error) { return c.l.Charge(c.ctx, key, n) })
}

// undo calls Undo of the admission d (or the store's Refund of it) and
// requires the model's answer.
func (c *checker) undo(key string, n int, d ratelimit.Decision) ratelimit.Decision {
	c.t.Helper()
	req := c.request(key, n)
	req.Admitted = d.At.UnixMicro()
	want, _ := c.model.Refund(req)
	return c.decide(fmt.Sprintf("Undo(%q, %d, the admission at %v)", key, n, d.At.Format(time.StampMicro)), req, want,
		func() (backend.Outcome, error) { return c.store.Refund(c.ctx, req) },
		func() (ratelimit.Decision, error) { return c.l.Undo(c.ctx, key, n, d) })
}

// chargesPastTheLimit: a charge that overshoots is recorded, answered as
// over (Remaining 0), and a request of cost 1 waits exactly its RetryAfter:
// denied a microsecond before, admitted then. (A charge of 1,200 tokens
// against 1,000 left was once denied and dropped, so the budget was never
// spent.)
func chargesPastTheLimit(t *testing.T, e *env) {
	if !e.charges(e.newStore(t)) {
		t.Skip("the store does not charge (its Charge is unsupported)")
	}
	c := e.checked(10, time.Second)
	c.clock.Advance(250 * time.Millisecond) // inside a window
	c.allowN("user", 4)
	d := c.charge("user", 25)
	mustFalse(t, d.Allowed, "25 past the 6 left: over")
	mustEqual(t, 0, d.Remaining)
	mustTrue(t, d.RetryAfter > 0, "a request of cost 1 waits")
	c.clock.Advance(d.RetryAfter - time.Microsecond)
	mustFalse(t, c.allow("user").Allowed, "a microsecond before the charge has left or drained")
	c.clock.Advance(time.Microsecond)
	mustTrue(t, c.allow("user").Allowed, "at its RetryAfter")
	c.clock.Advance(3 * time.Second)
	mustTrue(t, c.charge("user", 3).Allowed, "a charge that fits")
	c.charge("user", 1<<20) // far past: within the stored bounds, as the model
	c.clock.Advance(500 * time.Millisecond)
	c.peek("user")
	c.allow("user")
	c.clock.Advance(2 * time.Second)
	c.allow("user")

	_, err := c.l.Charge(c.ctx, "user", 0)
	mustErrorIs(t, err, ratelimit.ErrInvalidCost)
	_, err = c.l.Charge(c.ctx, "user", ratelimit.MaxCharge+1)
	mustErrorIs(t, err, ratelimit.ErrInvalidCost)
}

// checksTakeNothing: a check (Peek) before work, then a charge of what it
// used after: the checks take nothing, the charge all of it.
func checksTakeNothing(t *testing.T, e *env) {
	if !e.charges(e.newStore(t)) {
		t.Skip("the store does not charge (its Charge is unsupported)")
	}
	c := e.checked(100, time.Minute)
	for range 30 {
		d := c.peek("user")
		mustTrue(t, d.Allowed)
		mustEqual(t, 100, d.Remaining, "a check takes nothing")
	}
	mustEqual(t, 40, c.charge("user", 60).Remaining, "a charge takes what was used")
	mustTrue(t, c.peek("user").Allowed, "40 left")
	mustFalse(t, c.charge("user", 70).Allowed, "70 past the 40 left: recorded, over")
	mustFalse(t, c.peek("user").Allowed, "the budget is spent")
}

// undoesTheAdmissionItNames: under 2 per minute, A admitted at 0s (long
// running), B at 30s; A's work fails at 31s and its admission is undone.
// A refund of the newest units dropped B's instead, so two more fitted at
// 60s while B still counted: 3 served within one minute on a sliding log.
// Undo frees A's: one more fits at 31s, none at 60s, one at 90s (B left).
func undoesTheAdmissionItNames(t *testing.T, e *env) {
	if !e.refunds(e.newStore(t)) {
		t.Skip("the store does not refund (its Refund is unsupported)")
	}
	c := e.checked(2, time.Minute)
	a := c.allow("user")
	mustTrue(t, a.Allowed)
	c.clock.Advance(30 * time.Second)
	mustTrue(t, c.allow("user").Allowed, "B")
	c.clock.Advance(time.Second)
	c.undo("user", 1, a)
	c.undo("user", 1, a) // once given back, nothing more
	d := c.allow("user")
	c.clock.Advance(29 * time.Second) // 60s
	c.allow("user")
	c.clock.Advance(30 * time.Second) // 90s
	c.allow("user")
	if e.alg == ratelimit.SlidingWindow {
		mustTrue(t, d.Allowed, "A's place, at 31s")
	}
	for range 20 { // undoing at random, always as the model
		c.clock.Advance(7 * time.Second)
		if d := c.allow("user"); d.Allowed {
			c.clock.Advance(time.Second)
			c.undo("user", 1, d)
		}
	}
}

// multiChecksThenCharges: a budget of tokens checked before each request
// (a cost of 0 in Multi.AllowCosts) and charged what it used after, beside
// a limit of requests taken as usual. The check that finds the budget spent
// denies, and takes nothing from the requests' limit.
func multiChecksThenCharges(t *testing.T, e *env) {
	if !e.charges(e.newStore(t)) {
		t.Skip("the store does not charge (its Charge is unsupported)")
	}
	requests := e.limiter(10, time.Minute, ratelimit.WithPrefix(e.namespace()+"req:"), ratelimit.WithName("requests"))
	tokens := e.limiter(1000, time.Minute, ratelimit.WithPrefix(e.namespace()+"tok:"), ratelimit.WithName("tokens"))
	m, err := ratelimit.NewMulti(requests, tokens)
	mustNoError(t, err)
	ctx, keys := context.Background(), []string{"user", "user"}
	served := 0
	for range 10 {
		md, err := m.AllowCosts(ctx, keys, []int{1, 0})
		mustNoError(t, err)
		if !md.Allowed {
			mustEqual(t, "tokens", md.Name, "the spent budget denies")
			break
		}
		served++
		d, err := tokens.Charge(ctx, "user", 300) // the response's usage
		mustNoError(t, err)
		mustEqual(t, served*300 <= 1000, d.Allowed, "charge %d: whether it fit", served)
	}
	mustEqual(t, 4, served, "checked at 0, 300, 600 and 900 tokens")
	d, err := requests.Peek(ctx, "user")
	mustNoError(t, err)
	mustEqual(t, 4, d.Count, "the denied check took no request")
	d, err = tokens.Peek(ctx, "user")
	mustNoError(t, err)
	mustFalse(t, d.Allowed, "1,200 tokens used of 1,000: spent")

	_, err = m.AllowCosts(ctx, keys, []int{1, -1})
	mustErrorIs(t, err, ratelimit.ErrInvalidCost)
	_, err = m.AllowCosts(ctx, keys, []int{1})
	mustErrorIs(t, err, ratelimit.ErrInvalidArgument)
}
