package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
)

// keepsWhatCounts: a store keeps a key's state for as long as it counts
// (Effect.Life) and at least the rule's retention, whichever is longer.
// The rule's retention here is its window, the least there is, so a store
// that keeps state for its retention alone drops a GCRA bucket long before
// it drains (TokenBucket(1, 100ms, 20) takes 2 s) and lets a second burst
// through. The kit takes all it can, moves its clock by half a window at a
// time, has the store expire what it would by then (Expire), takes all it
// can again, and requires every answer to be the model's (which never
// forgets): state dropped once it no longer counts answers the same, state
// dropped sooner does not.
func keepsWhatCounts(t *testing.T, e *env) {
	if e.clock == nil {
		e.clock = NewManualClock(start())
	}
	s, model, ctx := storeOf(e.newStore(t)), modelOf(NewModel()), context.Background()
	window := 100 * time.Millisecond
	p := e.policy(5, window)
	if e.alg == ratelimit.GCRA {
		p = ratelimit.TokenBucket(1, window, 20)
	}
	rule, err := backend.NewRule(p.Algorithm, int64(p.Limit), p.Window, int64(p.Burst), p.Window, e.namespace())
	mustNoError(t, err)
	var times []int64
	elapsed := time.Duration(0)
	takeAll := func() {
		for i := int64(0); i <= rule.MaxCost(); i++ { // all it can, and one denial
			req := backend.Request{Rule: rule, Key: "user", Cost: 1, Now: e.clock.Now().UnixMicro()}
			got, err := s.Take(ctx, req)
			mustNoError(t, err)
			mustDecide(t, model.Take(req), got, "%v after %v: the state was dropped while it still counted (keep it for max(Effect.Life, Rule.Retain) after each write, and backend.KeepSlack more by a TTL)", p, elapsed)
			if !got.Allowed {
				break
			}
			times = append(times, req.Now)
		}
	}
	pass := func(d time.Duration) {
		e.clock.Advance(d)
		elapsed += d
		if e.expire != nil {
			e.expire(t, s.Store, elapsed)
		}
	}
	for elapsed <= 3*time.Second {
		takeAll()
		pass(window / 2)
	}
	// Idle: no write refreshes the state while it still counts for 2 s (a
	// GCRA bucket draining a burst; a window's state, for its retention).
	// Kept for less (a TTL of the retention and a slack alone), a second
	// burst gets through.
	takeAll()
	for idle := time.Duration(0); idle < 1500*time.Millisecond; idle += window / 2 {
		pass(window / 2)
	}
	takeAll()
	mustZero(t, OverAdmissions(times, p), "admissions beyond %v in %v", p, elapsed)
}

// keepsForItsRetention: a store keeps a key's state for the rule's
// retention after each write, even once it no longer counts under the
// rule's own window, so that a later rule with a window up to the
// retention finds the history (SetPolicy, a PolicyFunc). A store that kept
// state for its Life alone passed the kit. Checked with the store's expiry
// (Expire), at half the retention.
func keepsForItsRetention(t *testing.T, e *env) {
	e.clock = NewManualClock(start())
	s, model, ctx := storeOf(e.newStore(t)), modelOf(NewModel()), context.Background()
	const window, retain, long = 100 * time.Millisecond, 10 * time.Second, 10 * time.Second
	short, err := compileRetained(e.policy(5, window), retain, e.namespace())
	mustNoError(t, err)
	longer, err := compileRetained(e.policy(5, long), retain, e.namespace())
	mustNoError(t, err)
	for i := 0; i < 3; i++ {
		req := backend.Request{Rule: short, Key: "user", Cost: 1, Now: e.clock.Now().UnixMicro()}
		got, err := s.Take(ctx, req)
		mustNoError(t, err)
		mustDecide(t, model.Take(req), got, "a take under %v", short)
	}
	e.clock.Advance(retain / 2)
	if e.expire != nil {
		e.expire(t, s.Store, retain/2)
	}
	req := backend.Request{Rule: longer, Key: "user", Cost: 1, Now: e.clock.Now().UnixMicro()}
	want := model.Peek(req)
	mustPositive(t, want.Count, "the model counts the history under %v", longer)
	got, err := s.Peek(ctx, req)
	mustNoError(t, err)
	mustDecide(t, want, got, "%v after %v: the state was dropped within the rule's retention of %v (keep it for max(Effect.Life, Rule.Retain) after each write)", longer, retain/2, retain)
}

// keepsTheSlack: a store that drops state by a clock other than the one
// that decided keeps it backend.KeepSlack longer than max(Effect.Life,
// Rule.Retain), so that the time between a decision and its write, a
// clock that runs ahead, or a TTL's whole seconds never drop state that
// counts. The store's expiry clock here moves half of KeepSlack more than
// the deciding one between a write and the next decision, made just before
// the state stops counting: a TTL of the Life alone passed the kit
// (memcached's whole-second TTLs lived 1.06 to 2.01 s for 2 s).
func keepsTheSlack(t *testing.T, e *env) {
	if e.expire == nil {
		t.Skip("the store drops nothing by itself (no conformance.Expire): no slack to keep")
	}
	e.clock = NewManualClock(start())
	s, model, ctx := storeOf(e.newStore(t)), modelOf(NewModel()), context.Background()
	window := 100 * time.Millisecond
	p := e.policy(5, window)
	if e.alg == ratelimit.GCRA {
		p = ratelimit.TokenBucket(1, window, 20) // drains for 2 s
	}
	rule, err := compileRetained(p, p.Window, e.namespace())
	mustNoError(t, err)
	for i := int64(0); i < rule.MaxCost(); i++ {
		req := backend.Request{Rule: rule, Key: "user", Cost: 1, Now: e.clock.Now().UnixMicro()}
		got, err := s.Take(ctx, req)
		mustNoError(t, err)
		mustDecide(t, model.Take(req), got, "a take under %v", rule)
	}
	e.expire(t, s.Store, 0) // the store's clock on the kit's from here
	life := window          // the log's, and a fixed window's (taken at its start)
	switch e.alg {
	case ratelimit.SlidingWindowCounter:
		life = 2 * window // weighed through the next window
	case ratelimit.GCRA:
		life = time.Duration(rule.MaxCost()*rule.Window()/rule.Limit()) * time.Microsecond // the burst's drain
	}
	step, lead := life-10*time.Millisecond, backend.KeepSlack/2
	e.clock.Advance(step)
	e.expire(t, s.Store, step+lead)
	req := backend.Request{Rule: rule, Key: "user", Cost: 1, Now: e.clock.Now().UnixMicro()}
	want := model.Peek(req)
	mustPositive(t, want.Count, "the model still counts the state at %v", step)
	got, err := s.Peek(ctx, req)
	mustNoError(t, err)
	mustDecide(t, want, got, "%v, %v after its writes, the expiry's clock %v ahead: the state was dropped while it counted (keep it backend.KeepSlack longer than max(Effect.Life, Rule.Retain), whole seconds rounded up)", p, step, lead)
}

// compileRetained is p compiled for a store, its state kept at least
// retain, under prefix.
func compileRetained(p ratelimit.Policy, retain time.Duration, prefix string) (*backend.Rule, error) {
	return backend.NewRule(p.Algorithm, int64(p.Limit), p.Window, int64(p.Burst), retain, prefix)
}
