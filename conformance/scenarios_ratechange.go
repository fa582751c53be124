package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// rateChangeKeepsWholeRequests: a policy change on a key whose state was
// written partly drained. Under GCRA, the level written under 3 per second
// after two takes 166,667 µs apart holds 1.499999 requests' worth; the next
// decision, under 2 per second, first rounds that up to whole requests (2),
// at most the new burst, and weighs them in the new unit, then drains at
// the new rate from when the level was written (see package algorithm). A
// store converting the level exactly (ceil(level*u'/u): 750,000 units,
// 1.5 requests) or by floor answers a RetryAfter of about half the model's
// at the first denial. Under the window algorithms the same steps lower the
// limit mid-window. Every answer is the model's.
func rateChangeKeepsWholeRequests(t *testing.T, e *env) {
	s, model, ctx := storeOf(e.newStore(t)), modelOf(NewModel()), context.Background()
	policy := func(limit int) ratelimit.Policy {
		p := e.policy(limit, time.Second)
		if e.alg == ratelimit.GCRA {
			p.Burst = 3
		}
		return p
	}
	before, after := policy(3), policy(2)
	step := func(what string, p ratelimit.Policy, cost int, take bool) ratelimit.Decision {
		t.Helper()
		req := e.request("", "user", p, cost)
		got, err := s.Peek(ctx, req)
		want := model.Peek(req)
		if take {
			got, err = s.Take(ctx, req)
			want = model.Take(req)
		}
		mustNoError(t, err, what)
		mustDecide(t, want, got, "%s (%v, then %v: the level is rounded up to whole requests, at most the burst, before it is weighed in the new unit)", what, before, after)
		return got
	}
	step("a take under the first policy", before, 1, true)
	e.clock.Advance(166_667 * time.Microsecond)
	step("a second take, partly drained", before, 1, true)
	for i, at := range []time.Duration{10 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 900 * time.Millisecond} {
		e.clock.Advance(at)
		step(fmt.Sprintf("a peek of 2 under the second policy, step %d", i), after, 2, false)
		step(fmt.Sprintf("a take of 2 under the second policy, step %d", i), after, 2, true)
		step(fmt.Sprintf("a take of 1 under the second policy, step %d", i), after, 1, true)
	}
}
