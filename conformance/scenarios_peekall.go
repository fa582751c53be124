package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
)

// peekAllSaysWhatEachPeekSays: PeekAll of several requests (keys of one
// caller and of others, apart on a cluster; a key at its limit, one under
// a penalty box's rule, one part used, a cost over what is left, a fresh
// key) answers each as Peek does, and records nothing: not even a box for
// the key its rule would box. A store whose PeekAll is unsupported is
// skipped: callers then peek one by one.
func peekAllSaysWhatEachPeekSays(t *testing.T, e *env) {
	s, ctx, model, policy, boxed, take := e.several(t, "peek", backend.Store.PeekAll)
	for range 3 {
		take("a:", "alice", policy)
		take("boxed:", "alice", boxed)
	}
	take("a:", "bob", policy)
	take("c:", "bob", policy)
	e.clock.Advance(time.Second)
	reqs := func() []backend.Request {
		return []backend.Request{
			e.request("a:", "alice", policy, 1),
			e.request("boxed:", "alice", boxed, 1),
			e.request("a:", "bob", policy, 1),
			e.request("c:", "bob", policy, 3),
			e.request("a:", "carol", policy, 1),
		}
	}
	rs := reqs()
	outs := make([]backend.Outcome, len(rs))
	mustNoError(t, s.PeekAll(ctx, rs, outs))
	for i, r := range rs {
		mustDecide(t, decisionOf(model.Peek(r), r.Rule), decisionOf(outs[i], r.Rule), "request %d (%s%s)", i, r.Rule.Prefix(), r.Key)
	}
	mustFalse(t, outs[0].Allowed() || outs[1].Allowed() || outs[3].Allowed(), "at the limit, and a cost over what is left")
	mustTrue(t, outs[2].Allowed() && outs[4].Allowed())

	// Nothing was recorded: once the window has passed, every take is the
	// model's (a box the peek had set would deny alice's boxed key for an
	// hour).
	e.clock.Advance(2 * time.Minute)
	for i, r := range reqs() {
		out, err := s.Take(ctx, r)
		mustNoError(t, err)
		mustDecide(t, decisionOf(model.Take(r), r.Rule), decisionOf(out, r.Rule), "a take after the peeks, request %d", i)
		mustTrue(t, out.Allowed(), "request %d: nothing held it back", i)
	}
}

// several starts a scenario of several requests in one call (PeekAll,
// ChargeAll: what, its verb) on a new store, skipped when the store does
// not support call: the store, its model, a policy of 3 a minute and the
// same with an hour's penalty box where the store keeps boxes, and take,
// which takes 1 from the store and requires the model's answer.
func (e *env) several(t *testing.T, what string, call func(backend.Store, context.Context, []backend.Request, []backend.Outcome) error) (
	s backend.Store, ctx context.Context, model *Model, policy, boxed ratelimit.Policy, take func(prefix, key string, p ratelimit.Policy)) {
	s, ctx, model = e.newStore(t), context.Background(), NewModel()
	probe := []backend.Request{e.request(what+"-all-probe:", "probe", e.policy(1, time.Minute), 1)}
	if !supported(call(s, ctx, probe, make([]backend.Outcome, 1))) {
		t.Skipf("the store does not %s several requests together (it is unsupported)", what)
	}
	policy, boxed = e.policy(3, time.Minute), e.policy(3, time.Minute)
	if s.Info().Blocks {
		boxed = boxed.BlockFor(time.Hour)
	}
	take = func(prefix, key string, p ratelimit.Policy) {
		t.Helper()
		r := e.request(prefix, key, p, 1)
		out, err := s.Take(ctx, r)
		mustNoError(t, err)
		mustDecide(t, decisionOf(model.Take(r), r.Rule), decisionOf(out, r.Rule), "taking %s%s", prefix, key)
	}
	return s, ctx, model, policy, boxed, take
}
