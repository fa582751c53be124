package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
)

// keepsWhatCounts: a store keeps a key's state for as long as it counts
// (Outcome.Life) and at least the rule's retention, whichever is longer.
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
			mustDecide(t, model.Take(req), got, "%v after %v: the state was dropped while it still counted (keep it for max(Outcome.Life, Rule.Retain) after each write, and backend.KeepSlack more by a TTL)", p, elapsed)
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
