package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
)

// Scenarios about the Store contract itself, calling the store directly
// where the Limiter would hide a detail: peeks of any cost, a reset that
// covers every algorithm, a failure mode's answer, atomic multi-policy
// decisions.

func peekRecordsNothing(t *testing.T, e *env) {
	s, model, ctx := storeOf(e.newStore(t)), modelOf(NewModel()), context.Background()
	p := e.policy(5, time.Second)
	check := func(what string, got ratelimit.Decision, err error, want ratelimit.Decision) {
		t.Helper()
		mustNoError(t, err, what)
		mustDecide(t, want, got, what)
	}
	for cost := 1; cost <= 5; cost++ {
		req := e.request("", "user", p, cost)
		got, err := s.Peek(ctx, req)
		check(fmt.Sprintf("a peek of cost %d on an empty key", cost), got, err, model.Peek(req))
		mustTrue(t, got.Allowed)
		mustZero(t, got.Count, "nothing recorded by the peeks before")
	}
	req := e.request("", "user", p, 3)
	got, err := s.Take(ctx, req)
	check("a take of 3", got, err, model.Take(req))
	e.clock.Advance(100 * time.Millisecond)
	for _, cost := range []int{2, 3, 5} {
		req := e.request("", "user", p, cost)
		got, err := s.Peek(ctx, req)
		check("a peek at 3 of 5", got, err, model.Peek(req))
		mustEqual(t, cost <= 2, got.Allowed, "a peek of cost %d decides as a take of cost %d would", cost, cost)
		mustEqual(t, 3, got.Count)
	}
	// A whole window later, the take's entries are out of the window: a
	// peek must not count them, and must not prune them either (a later
	// take at an earlier time, as a skewed caller sends, still sees them).
	pass := time.Second
	if e.alg == ratelimit.SlidingWindowCounter {
		pass = 2 * time.Second // the previous window's count weighs through the next
	}
	e.clock.Advance(pass)
	req = e.request("", "user", p, 1)
	got, err = s.Peek(ctx, req)
	check("a peek after the window", got, err, model.Peek(req))
	mustZero(t, got.Count)
	e.clock.Advance(-pass)
	req = e.request("", "user", p, 3)
	got, err = s.Take(ctx, req)
	check("a take back in the window", got, err, model.Take(req))
	mustFalse(t, got.Allowed, "the peek pruned nothing: 3 + 3 > 5")
}

func resetClearsEveryAlgorithm(t *testing.T, e *env) {
	s, ctx := storeOf(e.newStore(t)), context.Background()
	for _, alg := range e.algorithms {
		p := policyOf(alg, 3, time.Minute)
		for _, id := range []string{"user", "bystander"} {
			d, err := s.Take(ctx, e.request("", id, p, 2))
			mustNoError(t, err)
			mustEqual(t, 2, d.Count, "%v: %s", alg, id)
		}
		d, err := s.Take(ctx, e.request("other:", "user", p, 1))
		mustNoError(t, err)
		mustEqual(t, 1, d.Count, "%v: the same key under another prefix", alg)
	}
	mustNoError(t, s.Reset(ctx, e.namespace(), "user"))
	for _, alg := range e.algorithms {
		p := policyOf(alg, 3, time.Minute)
		d, err := s.Peek(ctx, e.request("", "user", p, 1))
		mustNoError(t, err)
		mustZero(t, d.Count, "%v: reset cleared the key under every algorithm", alg)
		d, err = s.Peek(ctx, e.request("", "bystander", p, 1))
		mustNoError(t, err)
		mustEqual(t, 2, d.Count, "%v: another key keeps its history", alg)
		d, err = s.Peek(ctx, e.request("other:", "user", p, 1))
		mustNoError(t, err)
		mustEqual(t, 1, d.Count, "%v: the key under another prefix keeps its history", alg)
	}
	mustNoError(t, s.Reset(ctx, e.namespace(), "never-seen"), "resetting an unknown key")
}

// recorder keeps the Events an Observer sees.
type recorder struct {
	mu     sync.Mutex
	events []ratelimit.Event
}

func (r *recorder) Observe(_ context.Context, ev ratelimit.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

// failureModeAnswers makes the store fail for real (a cancelled context)
// under a Limiter that fails open and one that fails closed.
func failureModeAnswers(t *testing.T, e *env) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	rec := &recorder{}
	open := e.limiter(3, time.Minute, ratelimit.WithFailOpen(), ratelimit.WithObserver(rec))
	for _, call := range []struct {
		name string
		do   func() (ratelimit.Decision, error)
	}{
		{"Allow", func() (ratelimit.Decision, error) { return open.Allow(cancelled, "user") }},
		{"Peek", func() (ratelimit.Decision, error) { return open.Peek(cancelled, "user") }},
	} {
		d, err := call.do()
		mustNoError(t, err, "%s: a failure mode's decision is an answer, not an error", call.name)
		mustTrue(t, d.Allowed, call.name)
		mustEqual(t, ratelimit.SourceFailOpen, d.Source, "%s: the decision says a failure mode made it", call.name)
		mustEqual(t, 3, d.Limit, call.name)
		mustZero(t, d.Remaining, "%s: a failure mode knows no quota", call.name)
	}
	mustLen(t, rec.events, 2)
	for _, ev := range rec.events {
		mustErrorIs(t, ev.Err, ratelimit.ErrStore, "the observer gets the store's error")
		mustErrorIs(t, ev.Err, context.Canceled)
		mustEqual(t, ratelimit.SourceFailOpen, ev.Decision.Source)
	}

	closed := e.limiter(3, time.Minute)
	d, err := closed.Allow(cancelled, "user")
	mustErrorIs(t, err, ratelimit.ErrStore, "without a failure mode the caller gets the error")
	mustEqual(t, ratelimit.Decision{}, d, "and no decision with it")

	d, err = closed.Peek(context.Background(), "user")
	mustNoError(t, err)
	mustZero(t, d.Count, "nothing was recorded")
	mustEqual(t, ratelimit.SourceStore, d.Source, "the store's own decisions say so")
}

// takeAllIsAtomic runs only on a store that decides several requests
// together: several policies on one key (the case every such store must
// decide atomically: on a server their keys share a hash slot) are
// admitted together or not at all.
func takeAllIsAtomic(t *testing.T, e *env) {
	s := e.newStore(t)
	if !e.takesAll(s) {
		t.Skip("the store decides no requests together (its TakeAll is unsupported)")
	}
	ms, ctx, model := storeOf(s), context.Background(), modelOf(NewModel())
	other := ratelimit.SlidingWindow
	if e.alg == ratelimit.SlidingWindow {
		other = ratelimit.FixedWindow
	}
	reqs := func(cost int) []backend.Request {
		return []backend.Request{
			e.request("per-second:", "user", e.policy(3, time.Second), cost),
			e.request("per-minute:", "user", e.policy(5, time.Minute), cost),
			e.request("per-minute:", "user", policyOf(other, 4, time.Minute), cost),
		}
	}
	decide := func(what string, rs []backend.Request) []ratelimit.Decision {
		t.Helper()
		got, err := ms.TakeAll(ctx, rs)
		mustNoError(t, err, what)
		mustLen(t, got, len(rs), what)
		all := true
		for _, r := range rs {
			all = all && model.Peek(r).Allowed
		}
		for i, r := range rs {
			want := model.Peek(r)
			if all {
				want = model.Take(r)
			}
			mustDecide(t, want, got[i], "%s: request %d (%v)", what, i, r.Rule)
		}
		return got
	}
	for i := 0; i < 3; i++ {
		for _, d := range decide("within every limit", reqs(1)) {
			mustTrue(t, d.Allowed)
		}
	}
	got := decide("the per-second limit is full", reqs(1))
	mustFalse(t, got[0].Allowed)
	mustTrue(t, got[1].Allowed && got[2].Allowed, "the others would admit: their peeks say so")
	mustEqual(t, 3, got[1].Count, "and nothing was taken from them")
	e.clock.Advance(time.Second)
	if e.alg == ratelimit.SlidingWindowCounter {
		e.clock.Advance(time.Second) // the previous second's count weighs through the next
	}
	got = decide("a second later, cost 2 is over one per-minute limit", reqs(2))
	mustTrue(t, got[0].Allowed && got[1].Allowed)
	mustFalse(t, got[2].Allowed, "3+2 > 4")
	got = decide("cost 1 fits everywhere", reqs(1))
	mustEqual(t, []int{1, 4, 4}, []int{got[0].Count, got[1].Count, got[2].Count})

	// Requests the store may not be able to decide together (different
	// keys: different shards on a cluster): decided atomically, or refused
	// with nothing recorded.
	apart := []backend.Request{e.request("a:", "alice", e.policy(1, time.Minute), 1), e.request("b:", "bob", e.policy(1, time.Minute), 1)}
	ds, err := ms.TakeAll(ctx, apart)
	if errors.Is(err, errors.ErrUnsupported) {
		for _, r := range apart {
			d, err := ms.Peek(ctx, r)
			mustNoError(t, err)
			mustZero(t, d.Count, "a refused TakeAll recorded nothing")
		}
		return
	}
	mustNoError(t, err)
	mustTrue(t, ds[0].Allowed && ds[1].Allowed)
}

// multiDenialTakesNothing drives ratelimit.Multi, atomic or not, on the
// store.
func multiDenialTakesNothing(t *testing.T, e *env) {
	perKey := e.limiter(2, time.Minute, ratelimit.WithPrefix(e.namespace()+"per-key:"), ratelimit.WithName("per-key"))
	perTenant := e.limiter(10, time.Minute, ratelimit.WithPrefix(e.namespace()+"per-tenant:"), ratelimit.WithName("per-tenant"))
	m, err := ratelimit.NewMulti(perKey, perTenant)
	mustNoError(t, err)
	ctx := context.Background()
	for _, keys := range [][]string{{"user", "user"}, {"user", "tenant"}} {
		for i := 1; i <= 3; i++ {
			d, err := m.Allow(ctx, keys...)
			mustNoError(t, err)
			mustEqual(t, i <= 2, d.Allowed, "%v: request %d", keys, i)
			if i == 3 {
				mustEqual(t, "per-key", d.Name, "the denying policy")
				mustPositive(t, d.RetryAfter)
			}
		}
		p, err := perTenant.Peek(ctx, keys[1])
		mustNoError(t, err)
		mustEqual(t, 2, p.Count, "%v: the denial took nothing from per-tenant", keys)
		mustNoError(t, perKey.Reset(ctx, keys[0]))
		mustNoError(t, perTenant.Reset(ctx, keys[1]))
	}
}

// multiAnswersAsTheModel drives ratelimit.Multi over three policies on
// three keys of one store (per IP, per token, per tenant), however the store
// decides several keys (one atomic step, a step per shard, or one by one):
// every answer is the model's (its takes when all admit, its peeks when
// one denies; zero for a policy a denial kept Multi from asking), and each
// policy is observed at most once a request, never as a peek, the denying
// one exactly once.
func multiAnswersAsTheModel(t *testing.T, e *env) {
	s, model, ctx := e.newStore(t), modelOf(NewModel()), context.Background()
	var mu sync.Mutex
	seen := map[string]int{}
	peeks := 0
	observe := ratelimit.WithObserver(ratelimit.ObserverFunc(func(_ context.Context, ev ratelimit.Event) {
		mu.Lock()
		defer mu.Unlock()
		seen[ev.Name]++
		if ev.Op == ratelimit.OpPeek {
			peeks++
		}
	}))
	limits, keys := []int{3, 2, 3}, []string{"10.0.0.1", "token-7", "tenant-3"}
	var ls []*ratelimit.Limiter
	for i, limit := range limits {
		ls = append(ls, e.limiterOn(s, limit, time.Minute, ratelimit.WithPrefix(e.namespace()+fmt.Sprint("multi", i, ":")),
			ratelimit.WithName(fmt.Sprint("p", i)), observe))
	}
	m, err := ratelimit.NewMulti(ls...)
	mustNoError(t, err)
	for r := 1; r <= 3; r++ {
		e.clock.Advance(time.Millisecond)
		clear(seen)
		got, err := m.Allow(ctx, keys...)
		mustNoError(t, err)
		mustEqual(t, r <= 2, got.Allowed, "request %d", r)
		denier := -1
		for i := range ls {
			req := e.request(fmt.Sprint("multi", i, ":"), keys[i], e.policy(limits[i], time.Minute), 1)
			want := model.Peek(req)
			if r <= 2 {
				want = model.Take(req)
			}
			if !want.Allowed && denier < 0 {
				denier = i
			}
			d := got.Decisions[i]
			if d == (ratelimit.Decision{}) && r == 3 && denier >= 0 && i > denier {
				continue // not asked: a denial came first
			}
			mustDecide(t, want, d, "request %d, policy %d", r, i)
			mustTrue(t, seen[fmt.Sprint("p", i)] <= 1, "request %d: policy %d observed %d times", r, i, seen[fmt.Sprint("p", i)])
		}
		if r == 3 {
			mustEqual(t, "p1", got.Name, "the denying policy")
			mustEqual(t, 1, seen["p1"], "the denial observed once")
		} else {
			mustEqual(t, map[string]int{"p0": 1, "p1": 1, "p2": 1}, seen, "request %d: each admission observed once", r)
		}
	}
	mustZero(t, peeks, "Multi's looks are no decisions")
}
