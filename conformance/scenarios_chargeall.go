package conformance

import (
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
)

// chargeAllChargesAsEachChargeDoes: ChargeAll of several requests (keys of
// one caller and of others, apart on a cluster; one overshooting what is
// left, one under a penalty box's rule, one that fits, a fresh key charged
// past the rule's MaxCost) records each as Charge does and answers the
// model's: the boxed key goes in its box, and a second ChargeAll charges it
// there and answers so. Takes afterwards see every charge. A request past
// MaxCharge, or outcomes of another length, fail the call and charge none.
// A store whose ChargeAll is unsupported is skipped: callers then charge
// one by one.
func chargeAllChargesAsEachChargeDoes(t *testing.T, e *env) {
	s, ctx, model, policy, boxed, take := e.several(t, "charge", backend.Store.ChargeAll)
	for range 2 {
		take("a:", "alice", policy)
		take("boxed:", "alice", boxed)
	}
	take("a:", "bob", policy)
	reqs := func(costs ...int) []backend.Request {
		return []backend.Request{
			e.request("a:", "alice", policy, costs[0]),
			e.request("boxed:", "alice", boxed, costs[1]),
			e.request("a:", "bob", policy, costs[2]),
			e.request("c:", "carol", policy, costs[3]),
		}
	}
	chargeAll := func(what string, rs []backend.Request) []backend.Outcome {
		t.Helper()
		outs := make([]backend.Outcome, len(rs))
		mustNoError(t, s.ChargeAll(ctx, rs, outs), what)
		for i, r := range rs {
			mustDecide(t, decisionOf(model.Charge(r), r.Rule), decisionOf(outs[i], r.Rule), "%s: charge %d (%s%s, %d)", what, i, r.Rule.Prefix(), r.Key, r.Cost)
		}
		return outs
	}
	e.clock.Advance(time.Second)
	outs := chargeAll("the first ChargeAll", reqs(2, 2, 1, 10))
	mustFalse(t, outs[0].Allowed() || outs[1].Allowed() || outs[3].Allowed(), "two over what was left, and 10 of 3")
	mustTrue(t, outs[2].Allowed(), "1 of the 2 left")

	e.clock.Advance(time.Second)
	chargeAll("a second ChargeAll", reqs(1, 1, 1, 1))

	for _, bad := range [][]backend.Request{
		{e.request("a:", "bob", policy, 1), e.request("c:", "carol", policy, int(backend.MaxCharge)+1)},
		{e.request("a:", "bob", policy, 1), {Key: "carol", Cost: 1}},
	} {
		err := s.ChargeAll(ctx, bad, make([]backend.Outcome, len(bad)))
		mustTrue(t, err != nil && supported(err), "a bad request fails the call: %v", err)
	}
	err := s.ChargeAll(ctx, reqs(1, 1, 1, 1), make([]backend.Outcome, 3))
	mustErrorIs(t, err, backend.ErrInvalidArgument)

	// Every charge above and none of the failed calls' is recorded: the
	// takes are the model's, now and once the first charges have left.
	for _, step := range []time.Duration{time.Second, 58 * time.Second, time.Minute} {
		e.clock.Advance(step)
		for i, r := range reqs(1, 1, 1, 1) {
			out, err := s.Take(ctx, r)
			mustNoError(t, err)
			mustDecide(t, decisionOf(model.Take(r), r.Rule), decisionOf(out, r.Rule), "a take %v later, request %d (%s%s)", step, i, r.Rule.Prefix(), r.Key)
		}
	}
}
