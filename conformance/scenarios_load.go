package conformance

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
)

// Scenarios under load and on the store's own clock: random traffic against
// the model, hammering across instances, real time.

// matchesModel drives one key set with a random mix of calls, refunds, clock
// steps (some backwards, as skewed clients produce, some an hour, as a
// stepped clock does) and policy changes.
func matchesModel(t *testing.T, e *env) {
	randomTraffic(e, traffic{seed: 7, limit: 5, window: 200 * time.Millisecond, keys: 3, calls: 400,
		step: [2]int{-10, 49}, maxCost: 1 << 30, limits: [2]int{1, 8}, windows: [2]int{1, 400}, refund: 3,
		jump: func(rng *mrand.Rand) time.Duration { return time.Duration(1-2*rng.Intn(2)) * time.Hour },
		mix:  [8]int{46, 70, 84, 87, 89, 92, 96, 98}})
}

// matchesModelAtLimitsOfTens is matchesModel at limits of 10 to 40, where
// requests of several units are common and a window holds dozens of
// entries: a store that keeps some of them at hand (a sliding log's oldest
// entries, say) must answer retries, resets and counts that reach past
// them as the model does.
func matchesModelAtLimitsOfTens(t *testing.T, e *env) {
	randomTraffic(e, traffic{seed: 11, limit: 25, window: 300 * time.Millisecond, keys: 2, calls: 600,
		step: [2]int{-2, 9}, maxCost: 5, limits: [2]int{10, 40}, windows: [2]int{50, 449}, refund: 4,
		jump: func(rng *mrand.Rand) time.Duration { return -time.Duration(rng.Intn(400)) * time.Millisecond },
		mix:  [8]int{42, 70, 82, 84, 87, 91, 95, 98}})
}

// matchesModelAtLimitsOfHundreds is matchesModel at limits of 60 to 250,
// where windows hold hundreds of units: a store that keeps a short log in
// one form and a long one in another (the Redis scripts: a string up to a
// limit of 128, a sorted set above) must carry a key's entries across a
// live change of the limit between them, either way, as the model does.
func matchesModelAtLimitsOfHundreds(t *testing.T, e *env) {
	randomTraffic(e, traffic{seed: 13, limit: 200, window: time.Second, keys: 1, calls: 1200,
		step: [2]int{-1, 3}, maxCost: 4, limits: [2]int{60, 250}, windows: [2]int{300, 1500}, refund: 6,
		jump: func(rng *mrand.Rand) time.Duration { return -time.Duration(rng.Intn(200)) * time.Millisecond },
		mix:  [8]int{52, 76, 84, 85, 89, 92, 96, 98}})
}

// traffic is a random load on a checked Limiter: its first policy, its
// keys and calls, the clock's step between calls (ms, from step[0] to
// step[1]), the largest cost, the policies it changes to (limits and
// windows in ms, inclusive ranges), the largest refund, a jump of the
// clock, and the mix: the percentiles below which a call is an Allow, an
// AllowN, a Peek, a Reset, a policy change, a Refund, a Charge (up to three
// times the largest cost), an Undo of a recent admission; above the last, a
// jump.
type traffic struct {
	seed            int64
	limit           int
	window          time.Duration
	keys, calls     int
	step            [2]int
	maxCost         int
	limits, windows [2]int
	refund          int
	jump            func(*mrand.Rand) time.Duration
	mix             [8]int
}

// randomTraffic runs tr, every answer checked against the model.
func randomTraffic(e *env, tr traffic) {
	rng := mrand.New(mrand.NewSource(int64(e.alg) + tr.seed))
	s := e.newStore(e.t)
	charges, refunds := e.charges(s), e.refunds(s)
	c := e.checkerOn(s, e.limiterOn(s, tr.limit, tr.window))
	admitted := map[string][]ratelimit.Decision{} // recent admissions, to undo
	admit := func(key string, d ratelimit.Decision) {
		if d.Allowed {
			admitted[key] = append(admitted[key][max(0, len(admitted[key])-5):], d)
		}
	}
	for i := 0; i < tr.calls; i++ {
		c.clock.Advance(time.Duration(tr.step[0]+rng.Intn(tr.step[1]-tr.step[0]+1)) * time.Millisecond)
		key := string(rune('a' + rng.Intn(tr.keys)))
		switch r := rng.Intn(100); {
		case r < tr.mix[0]:
			admit(key, c.allow(key))
		case r < tr.mix[1]:
			admit(key, c.allowN(key, 1+rng.Intn(min(tr.maxCost, c.l.Policy().MaxCost()))))
		case r < tr.mix[2]:
			c.peek(key)
		case r < tr.mix[3]:
			c.reset(key)
		case r < tr.mix[4]:
			limit := tr.limits[0] + rng.Intn(tr.limits[1]-tr.limits[0]+1)
			window := tr.windows[0] + rng.Intn(tr.windows[1]-tr.windows[0]+1)
			c.setPolicy(e.policy(limit, time.Duration(window)*time.Millisecond))
		case r < tr.mix[5]:
			c.refund(key, 1+rng.Intn(tr.refund))
		case r < tr.mix[6]:
			if charges {
				admit(key, c.charge(key, 1+rng.Intn(3*min(tr.maxCost, c.l.Policy().MaxCost()))))
			}
		case r < tr.mix[7]:
			if ds := admitted[key]; refunds && len(ds) > 0 {
				c.undo(key, 1+rng.Intn(tr.refund), ds[rng.Intn(len(ds))])
			}
		default:
			c.clock.Advance(tr.jump(rng))
		}
	}
}

// overHint is what a store that over-admits under load most likely broke.
const overHint = "over-admitted under concurrency: is the clock read inside the atomic step, after the lock, " +
	"not before it (PostgreSQL's now() is the transaction's start), and read again on every retry of a " +
	"compare-and-swap loop? are the read, the decision and the write one atomic step (SELECT ... FOR UPDATE " +
	"in one transaction, one script, a CAS that fails when another wrote)? or was state dropped while it " +
	"still counted (a TTL shorter than max(Effect.Life, Rule.Retain) plus backend.KeepSlack, or whole " +
	"seconds rounded down)?"

// noOverAdmission hammers one key from 16 goroutines over 4 store instances,
// first at one manual instant, then on the store's own clock with a window
// far longer than the run (and, for a fixed window, clear of its end):
// exactly the limit is admitted, never more.
func noOverAdmission(t *testing.T, e *env) {
	const limit, goroutines, perGoroutine, instances = 50, 16, 20, 4
	for _, mode := range []string{"manual clock", "store clock"} {
		var limiters []*ratelimit.Limiter
		for i := 0; i < instances; i++ {
			if mode == "manual clock" {
				limiters = append(limiters, e.limiter(limit, time.Hour))
			} else {
				limiters = append(limiters, e.realTimeLimiter(limit, time.Hour))
			}
		}
		if mode == "store clock" {
			e.clearOfBoundary(limiters[0], 10*time.Second)
		}
		key := "hammered-" + mode
		var admitted, failed atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func(l *ratelimit.Limiter) {
				defer wg.Done()
				for i := 0; i < perGoroutine; i++ {
					d, err := l.Allow(context.Background(), key)
					if err != nil {
						failed.Add(1)
						continue
					}
					if d.Allowed {
						admitted.Add(1)
					}
					if d.Count > limit {
						failed.Add(1)
					}
				}
			}(limiters[g%instances])
		}
		wg.Wait()
		mustZero(t, failed.Load(), "%s: calls that failed or reported a count over %d", mode, limit)
		mustEqual(t, int64(limit), admitted.Load(), "%s: %d calls on one key with limit %d (%s)", mode, goroutines*perGoroutine, limit, overHint)
	}
}

// noOverAdmissionInAnyWindow hammers one key from 64 goroutines over 4
// store instances for 8 windows of 50ms, on the store's clock, and checks
// every window (any interval for a sliding window, every aligned one for a
// fixed window) with the times the store decided at.
func noOverAdmissionInAnyWindow(t *testing.T, e *env) {
	const limit, window, run, goroutines, instances = 20, 50 * time.Millisecond, 400 * time.Millisecond, 64, 4
	var limiters []*ratelimit.Limiter
	for i := 0; i < instances; i++ {
		limiters = append(limiters, e.realTimeLimiter(limit, window))
	}
	var mu sync.Mutex
	var admitted []int64
	var decisions, failed atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(run)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(l *ratelimit.Limiter) {
			defer wg.Done()
			for time.Now().Before(deadline) {
				d, err := l.Allow(context.Background(), "hammered")
				decisions.Add(1)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				if d.Allowed {
					mu.Lock()
					admitted = append(admitted, d.At.UnixMicro())
					mu.Unlock()
				}
			}
		}(limiters[g%instances])
	}
	wg.Wait()
	mustZero(t, failed.Load(), "calls that failed; the first: %v", firstErr.Load())
	mustGreaterOrEqual(t, len(admitted), limit, "the load got through (%d decisions)", decisions.Load())
	// The bound on the count is computed from when the store decided (a
	// loaded machine stretches the nominal run), and the real property is
	// checked on those times below.
	first, last := slices.Min(admitted), slices.Max(admitted)
	span := time.Duration(last-first) * time.Microsecond
	windows := int(span/window) + 2
	if e.alg == ratelimit.FixedWindow || e.alg == ratelimit.SlidingWindowCounter {
		windows *= 2 // up to 2*limit around a boundary
	}
	mustLessOrEqual(t, len(admitted), limit*windows, "admitted over %v (decided at, first to last admission) with %d per %v (%s)", span, limit, window, overHint)
	over := OverAdmissions(admitted, e.policy(limit, window))
	mustZero(t, over, "intervals that admitted more than %v allows (of %d admitted, %d decisions; %s)", e.alg, len(admitted), decisions.Load(), overHint)
}

// storeClock checks the store's own clock in real time: 3 calls in a
// window of 100ms (deny the third), then a call once its RetryAfter has
// passed (admit). The first part needs the 3 calls to be decided within
// half the window; on a machine too loaded for that, the window doubles
// and the scenario runs again (up to 1.6s), since a slow machine says
// nothing of the store's clock.
func storeClock(t *testing.T, e *env) {
	window := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		took, ok := storeClockOnce(t, e, window, fmt.Sprint("user-", attempt))
		if ok {
			return
		}
		if attempt == 5 {
			t.Fatalf("precondition: 3 calls never fitted in half a window, up to %v (the last took %v)", window, took)
		}
		t.Logf("3 calls took %v, over half the window of %v: again with twice the window", took, window)
		window *= 2
	}
}

// storeClockOnce runs the scenario on key with a window of window; false
// (and how long the 3 calls took) when the machine was too slow for it.
func storeClockOnce(t *testing.T, e *env, window time.Duration, key string) (time.Duration, bool) {
	margin := window / 2
	l := e.realTimeLimiter(2, window)
	ctx := context.Background()
	e.clearOfBoundary(l, window-margin)
	began := time.Now()
	for i := 0; i < 2; i++ {
		d, err := l.Allow(ctx, key)
		mustNoError(t, err)
		mustTrue(t, d.Allowed)
	}
	before := time.Now()
	d, err := l.Allow(ctx, key)
	after := time.Now()
	mustNoError(t, err)
	if took := after.Sub(began); took >= margin {
		return took, false
	}
	mustFalse(t, d.Allowed)
	mustPositive(t, d.RetryAfter)
	longest := window
	if e.alg == ratelimit.SlidingWindowCounter {
		longest = 2 * window // the next window, once enough of this one's count has slid out
	}
	mustLessOrEqual(t, d.RetryAfter, longest)
	// The store decided at its own time, between our call and its answer:
	// a local server reads our wall clock, the memory store the monotonic
	// clock from a wall-clock reading at its start (skew allows for what
	// the two may drift apart while the tests run).
	const skew = 10 * time.Millisecond
	mustFalse(t, d.At.Before(before.Add(-skew)) || d.At.After(after.Add(skew)),
		"the store's clock is ours: decided at %v, called at %v, answered at %v", d.At.Format(time.StampMicro),
		before.Format(time.StampMicro), after.Format(time.StampMicro))
	mustEqual(t, d.At.Add(d.RetryAfter), d.ResetAt, "a denial's ResetAt is At + RetryAfter (the oldest leaves / the window ends)")
	time.Sleep(d.RetryAfter + time.Millisecond)
	d, err = l.Allow(ctx, key)
	mustNoError(t, err)
	mustTrue(t, d.Allowed, "retry-after (%v) has passed", d.RetryAfter)
	return after.Sub(began), true
}

// takeAllUnderLoad hammers TakeAll of two policies on one key (7 and 10
// per hour, at one instant) from 16 goroutines over 4 store instances:
// each step admits both or records nothing, so exactly 7 are admitted and
// each policy counts exactly those 7. The kit checked TakeAll one call at a
// time only: a store that peeks every request and then takes each without
// holding them all passed it, and over-admits here.
func takeAllUnderLoad(t *testing.T, e *env) {
	const goroutines, perGoroutine, instances = 16, 20, 4
	var stores []backend.Store
	for i := 0; i < instances; i++ {
		stores = append(stores, e.newStore(t))
	}
	now := start().UnixMicro()
	seven, err := compileRetained(e.policy(7, time.Hour), time.Hour, e.namespace()+"seven:")
	mustNoError(t, err)
	ten, err := compileRetained(e.policy(10, time.Hour), time.Hour, e.namespace()+"ten:")
	mustNoError(t, err)
	reqs := []backend.Request{{Rule: seven, Key: "together", Cost: 1, Now: now}, {Rule: ten, Key: "together", Cost: 1, Now: now}}
	first := make([]backend.Outcome, 2)
	if err := stores[0].TakeAll(context.Background(), reqs, first); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("the store refuses these requests together:", err)
	} else {
		mustNoError(t, err)
		mustTrue(t, first[0].Allowed() && first[1].Allowed(), "the first TakeAll admits both")
	}
	var admitted, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(s backend.Store) {
			defer wg.Done()
			for i := 0; i < perGoroutine; i++ {
				outs := make([]backend.Outcome, 2)
				if err := s.TakeAll(context.Background(), reqs, outs); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				if outs[0].Allowed() && outs[1].Allowed() {
					admitted.Add(1)
				}
			}
		}(stores[g%instances])
	}
	wg.Wait()
	mustZero(t, failed.Load(), "TakeAlls that failed; the first: %v", firstErr.Load())
	mustEqual(t, int64(6), admitted.Load(), "%d TakeAlls of 7 and 10 per hour, after a first (%s)", goroutines*perGoroutine, overHint)
	for _, req := range reqs {
		out, err := stores[1].Peek(context.Background(), req)
		mustNoError(t, err)
		mustEqual(t, int64(7), out.Count, "%v counts every step admitted, and no other", req.Rule)
	}
}
