package conformance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	mrand "math/rand"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
)

// In flight: permits held at once (backend.Store's Acquire and Release),
// run once, not per algorithm, for a store that holds them.
var permitScenarios = []scenario{
	{"at most the limit held; a denial says how many and when the first lease ends", permitsMatchTheModel},
	{"a crashed holder's permits come back when their leases end", permitsOfTheCrashedComeBack},
	{"a release twice, late, or of a permit never held changes nothing", releasesAreHarmless},
	{"never more than the limit held under a hammer (200 goroutines, 3 instances)", permitsUnderAHammer},
	{"only Acquire, Release and Peek decide permits", permitsAreNotTaken},
}

// runPermits runs the permit scenarios, or says the store holds none.
func runPermits(t *testing.T, newStore NewStore, c options) {
	t.Run("inflight", func(t *testing.T) {
		e := &env{t: t, newStore: newStore, alg: backend.InFlight, direct: true, expire: c.expire}
		if _, err := newStore(t).Acquire(context.Background(), e.request("probe:", "probe", ratelimit.Concurrency(1, time.Minute), 1), 1); errors.Is(err, errors.ErrUnsupported) {
			t.Skip("the store holds no permits (its Acquire is unsupported)")
		}
		for _, sc := range permitScenarios {
			t.Run(sc.name, func(t *testing.T) {
				sc.run(t, &env{t: t, newStore: newStore, alg: backend.InFlight, direct: true, expire: c.expire})
			})
		}
	})
}

// permits decides permits on a store at the kit's clock, every answer
// required to be the model's.
type permits struct {
	t     *testing.T
	store backend.Store
	model *Model
	clock *ManualClock
	rule  *backend.Rule
}

func (e *env) permits(limit int, lease time.Duration) *permits {
	e.t.Helper()
	req := e.request("", "probe", ratelimit.Concurrency(limit, lease), 1) // starts the clock, compiles the rule
	return &permits{t: e.t, store: e.newStore(e.t), model: NewModel(), clock: e.clock, rule: req.Rule}
}

func (p *permits) request(key string) backend.Request {
	return backend.Request{Rule: p.rule, Key: key, Cost: 1, Now: p.clock.Now().UnixMicro()}
}

// do is op's answer, required to be the model's.
func (p *permits) do(what string, req backend.Request, want backend.Outcome, got func() (backend.Outcome, error)) ratelimit.Decision {
	p.t.Helper()
	out, err := got()
	mustNoError(p.t, err, what)
	d := decisionOf(out, req.Rule)
	mustDecide(p.t, decisionOf(want, req.Rule), d, "%s at %v under %v", what, p.clock.Now().Format(time.StampMicro), p.rule)
	return d
}

func (p *permits) acquire(key string, id int64) ratelimit.Decision {
	p.t.Helper()
	req := p.request(key)
	return p.do(fmt.Sprintf("Acquire(%q, %d)", key, id), req, p.model.Acquire(req, id),
		func() (backend.Outcome, error) { return p.store.Acquire(context.Background(), req, id) })
}

func (p *permits) release(key string, id int64) ratelimit.Decision {
	p.t.Helper()
	req := p.request(key)
	return p.do(fmt.Sprintf("Release(%q, %d)", key, id), req, p.model.Release(req, id),
		func() (backend.Outcome, error) { return p.store.Release(context.Background(), req, id) })
}

func (p *permits) peek(key string) ratelimit.Decision {
	p.t.Helper()
	req := p.request(key)
	return p.do(fmt.Sprintf("Peek(%q)", key), req, p.model.Peek(req),
		func() (backend.Outcome, error) { return p.store.Peek(context.Background(), req) })
}

// permitsMatchTheModel: three permits, leases of 10s; then random traffic
// of acquisitions, renewals, releases, peeks and clock steps (past leases
// and back, a little, as skewed callers do), as the model.
func permitsMatchTheModel(t *testing.T, e *env) {
	p := e.permits(3, 10*time.Second)
	for id := int64(1); id <= 3; id++ {
		p.clock.Advance(time.Second)
		mustTrue(t, p.acquire("user", id).Allowed, "permit %d", id)
	}
	d := p.acquire("user", 4)
	mustFalse(t, d.Allowed, "a fourth")
	mustEqual(t, 3, d.Count, "three held")
	mustEqual(t, 8*time.Second, d.RetryAfter, "until the first lease ends (at 11s, now 3s)")
	mustTrue(t, p.acquire("user", 1).Allowed, "a renewal, every permit held")
	p.release("user", 2)
	mustTrue(t, p.acquire("user", 4).Allowed, "the place of the one released")

	rng := mrand.New(mrand.NewSource(17))
	for i := 0; i < 400; i++ {
		switch r := rng.Intn(100); {
		case r < 40:
			p.clock.Advance(time.Duration(rng.Intn(3000)) * time.Millisecond)
		case r < 43:
			p.clock.Advance(-time.Duration(rng.Intn(2000)) * time.Millisecond)
		}
		key := fmt.Sprint("k", rng.Intn(2))
		id := int64(1 + rng.Intn(6))
		switch r := rng.Intn(10); {
		case r < 5:
			p.acquire(key, id)
		case r < 8:
			p.release(key, id)
		default:
			p.peek(key)
		}
	}
}

// permitsOfTheCrashedComeBack: holders that crashed renew nothing; their
// permits are back exactly when their leases end, on the kit's clock, and
// a holder that renews keeps its permit.
func permitsOfTheCrashedComeBack(t *testing.T, e *env) {
	p := e.permits(2, 5*time.Second)
	mustTrue(t, p.acquire("user", 1).Allowed)
	p.clock.Advance(time.Second)
	mustTrue(t, p.acquire("user", 2).Allowed)
	p.clock.Advance(3999 * time.Millisecond) // 4.999s: holder 1 crashed; holder 2 renews
	mustTrue(t, p.acquire("user", 2).Allowed, "renewed")
	mustFalse(t, p.acquire("user", 3).Allowed, "1µs before the crashed holder's lease ends")
	p.clock.Advance(time.Millisecond)
	mustTrue(t, p.acquire("user", 3).Allowed, "at its end: its permit is back")
	mustFalse(t, p.acquire("user", 4).Allowed, "holder 2 renewed")

	// Real time, the store's clock: a holder that stops renewing (a killed
	// instance) has its permit back once its lease has passed, not before.
	lease := 300 * time.Millisecond
	a, b := e.newStore(t), e.newStore(t)
	rule := e.request("crash:", "probe", ratelimit.Concurrency(1, lease), 1).Rule
	req := backend.Request{Rule: rule, Key: "user", Cost: 1}
	held, err := a.Acquire(context.Background(), req, 1)
	mustNoError(t, err)
	mustTrue(t, held.Allowed())
	for deadline := time.Now().Add(30 * time.Second); ; {
		mustTrue(t, time.Now().Before(deadline), "the permit never came back: the store's clock does not move?")
		out, err := b.Acquire(context.Background(), req, 2)
		mustNoError(t, err)
		if out.Allowed() {
			mustTrue(t, out.At >= held.At+lease.Microseconds(), "back only once the lease has passed (%dµs after it was taken)", out.At-held.At)
			break
		}
		mustTrue(t, out.At < held.At+lease.Microseconds(), "denied only while the lease runs")
		time.Sleep(10 * time.Millisecond)
	}
}

// releasesAreHarmless: a permit released twice, after its lease ended, or
// never held, frees nothing more.
func releasesAreHarmless(t *testing.T, e *env) {
	p := e.permits(2, 5*time.Second)
	p.acquire("user", 1)
	p.acquire("user", 2)
	mustEqual(t, 1, p.release("user", 1).Count)
	mustEqual(t, 1, p.release("user", 1).Count, "released twice")
	mustEqual(t, 1, p.release("user", 9).Count, "never held")
	p.clock.Advance(6 * time.Second)
	mustEqual(t, 0, p.release("user", 2).Count, "after its lease ended")
	mustTrue(t, p.acquire("user", 3).Allowed)
	mustTrue(t, p.acquire("user", 4).Allowed)
	mustFalse(t, p.acquire("user", 5).Allowed, "two, no more")
	_, err := p.store.Release(context.Background(), p.request("user"), 0)
	mustErrorIs(t, err, ratelimit.ErrInvalidArgument, "id 0")
}

// permitsUnderAHammer: 200 goroutines over 3 store instances acquire one
// key's permits (limit 10), hold each a moment and release it; every
// interval a permit was held, from its acquisition's time to its release's
// (both the store's clock), overlaps at most 9 others.
func permitsUnderAHammer(t *testing.T, e *env) {
	const limit, goroutines, rounds = 10, 200, 5
	stores := []backend.Store{e.newStore(t), e.newStore(t), e.newStore(t)}
	rule := e.request("hammer:", "probe", ratelimit.Concurrency(limit, time.Minute), 1).Rule
	req := backend.Request{Rule: rule, Key: "user", Cost: 1}
	type held struct{ from, to int64 }
	var mu sync.Mutex
	var intervals []held
	var errs []error
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[g%len(stores)]
			for r := 0; r < rounds; r++ {
				id := int64(g*rounds + r + 1)
				out, err := s.Acquire(context.Background(), req, id)
				if err == nil && out.Allowed() {
					time.Sleep(time.Duration(1+mrand.Intn(3)) * time.Millisecond) // the work
					var rel backend.Outcome
					if rel, err = s.Release(context.Background(), req, id); err == nil {
						mu.Lock()
						intervals = append(intervals, held{out.At, rel.At})
						mu.Unlock()
					}
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	mustNoError(t, errors.Join(errs...), "the hammer's calls")
	type edge struct{ at, d int64 }
	edges := make([]edge, 0, 2*len(intervals))
	for _, h := range intervals {
		edges = append(edges, edge{h.from, +1}, edge{h.to, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int { // at one time, a release before an acquisition
		if a.at != b.at {
			return cmp.Compare(a.at, b.at)
		}
		return cmp.Compare(a.d, b.d)
	})
	most, now := 0, 0
	for _, ed := range edges {
		now += int(ed.d)
		most = max(most, now)
	}
	t.Logf("%d permits held and released; at most %d at once", len(intervals), most)
	mustTrue(t, most <= limit, "%d permits held at once, over the limit of %d", most, limit)
	mustTrue(t, len(intervals) >= limit, "the hammer held permits: %d", len(intervals))
}

// permitsAreNotTaken: an InFlight rule is no rate: Take, TakeAll, Charge and
// Refund refuse it (errors.ErrUnsupported), recording nothing.
func permitsAreNotTaken(t *testing.T, e *env) {
	p := e.permits(2, time.Minute)
	req := p.request("user")
	for name, call := range map[string]func() error{
		"Take":   func() error { _, err := p.store.Take(context.Background(), req); return err },
		"Charge": func() error { _, err := p.store.Charge(context.Background(), req); return err },
		"Refund": func() error { _, err := p.store.Refund(context.Background(), req); return err },
		"TakeAll": func() error {
			other := req
			other.Key = "other"
			return p.store.TakeAll(context.Background(), []backend.Request{req, other}, make([]backend.Outcome, 2))
		},
	} {
		err := call()
		mustTrue(t, err != nil && (errors.Is(err, errors.ErrUnsupported) || errors.Is(err, ratelimit.ErrInvalidPolicy)), "%s of permits: %v", name, err)
	}
	mustEqual(t, 0, p.peek("user").Count, "nothing recorded")
}
