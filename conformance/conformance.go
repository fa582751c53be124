// Package conformance is the executable specification of a ratelimit.Store.
// Every backend in this module runs it from its tests; so should yours:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t *testing.T) ratelimit.Store {
//			return mystore.New(newClient(t)) // a new client on the same server
//		})
//	}
//
// Run calls newStore one or more times in each subtest. Every Store returned
// within one subtest must share state, as app instances share one server: for
// a network store, return a new client of the same server each time; for an
// in-process store, wrap the constructor with InProcess. Subtests write under
// their own random key prefix, so a server needs no flushing between them;
// release what you open with t.Cleanup.
//
// Most scenarios drive the Limiter with an injected clock
// (ratelimit.WithCallerClock) and compare every Decision, field by field,
// with Model, the reference implementation of the rules; those that test the
// store's own clock use real time with short windows and explicit margins, so
// the suite also holds on a server that keeps its own time. A store that is
// also a ratelimit.MultiStore has its TakeAll checked too. Benchmark measures
// a store the way this module's backends are measured.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// NewStore returns a Store sharing state with every other Store it returned
// in the same test t.
type NewStore func(t *testing.T) ratelimit.Store

// InProcess adapts the constructor of an in-process store, whose instances
// cannot share state: within one test, every call returns the store the first
// call made.
func InProcess(newStore NewStore) NewStore {
	var mu sync.Mutex
	stores := map[*testing.T]ratelimit.Store{}
	return func(t *testing.T) ratelimit.Store {
		mu.Lock()
		defer mu.Unlock()
		if s, ok := stores[t]; ok {
			return s
		}
		s := newStore(t)
		stores[t] = s
		t.Cleanup(func() {
			mu.Lock()
			delete(stores, t)
			mu.Unlock()
		})
		return s
	}
}

// Run runs every scenario against stores from newStore, once for each
// algorithm the store supports (every one unless Supports says otherwise),
// as subtests named after the behaviour they require.
func Run(t *testing.T, newStore NewStore, opts ...Option) {
	c := options{algorithms: ratelimit.Algorithms()}
	for _, o := range opts {
		o(&c)
	}
	for _, alg := range c.algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) {
					sc.run(t, &env{t: t, newStore: newStore, alg: alg, algorithms: c.algorithms})
				})
			}
		})
	}
	if len(c.algorithms) < len(ratelimit.Algorithms()) {
		t.Run("refuses the algorithms it does not support", func(t *testing.T) { refusesUnsupported(t, newStore, c.algorithms) })
	}
}

// Option changes what Run checks.
type Option func(*options)

type options struct {
	algorithms []ratelimit.Algorithm
}

// Supports says which algorithms the store decides; the others it must
// refuse, recording nothing, with an error wrapping errors.ErrUnsupported
// (checked too). Scenarios that cross algorithms use only these.
func Supports(algs ...ratelimit.Algorithm) Option {
	return func(c *options) { c.algorithms = algs }
}

var scenarios = []struct {
	name string
	run  func(*testing.T, *env)
}{
	{"allows requests within the limit", allowsWithinLimit},
	{"denies the request after the limit and records nothing", deniesAfterLimit},
	{"peek reports the quota without consuming it", peekDoesNotConsume},
	{"frees quota as the window passes", freesQuotaAsWindowPasses},
	{"bursts at a window boundary only with a fixed window", boundaryBurst},
	{"remaining decreases and never goes negative", remainingNeverNegative},
	{"reset restores the full quota", resetRestoresQuota},
	{"a new policy applies to existing keys at once", reconfigureAppliesToExistingKeys},
	{"keys, prefixes and algorithms are isolated", keysAreIsolated},
	{"AllowN consumes its cost", allowNConsumesCost},
	{"retry-after is exact", retryAfterIsExact},
	{"counts every request of the same microsecond", sameMicrosecond},
	{"rejects invalid input and records nothing", rejectsInvalidInput},
	{"refuses a cost or a time it cannot decide exactly, recording nothing", refusesWhatItCannotDecide},
	{"a cancelled context returns promptly with an error", cancelledContext},
	{"matches the reference model on random traffic", matchesModel},
	{"never over-admits under concurrency across instances", noOverAdmission},
	{"never over-admits in any window under load (64 goroutines, 4 instances)", noOverAdmissionInAnyWindow},
	{"uses the store's own clock when it is asked to", storeClock},
	{"peek at any cost decides as take would and records nothing", peekRecordsNothing},
	{"reset clears the key under every algorithm, and only that key", resetClearsEveryAlgorithm},
	{"a failure mode's decision says so and comes without an error", failureModeAnswers},
	{"TakeAll admits several policies on one key together or not at all", takeAllIsAtomic},
	{"Multi: a denial takes nothing from the other policies", multiDenialTakesNothing},
	{"limits and costs at their bounds neither overflow nor over-admit", atTheBounds},
	{"state from a clock that stepped back holds nothing past one window", clockStepsBack},
	{"a longer window within the retention keeps the history", longerWindowKeepsHistory},
	{"a refund gives back exactly what was taken, and no more", refunds},
	{"a policy per key applies at once with the key's history", policyPerKey},
}

// env is what a scenario works with.
type env struct {
	t        *testing.T
	newStore NewStore
	alg      ratelimit.Algorithm
	// algorithms are those the store supports (Supports).
	algorithms []ratelimit.Algorithm
	prefix     string
	clock      *ManualClock
}

// start is where manual clocks start: a round time, so fixed windows of whole
// seconds start there, and recent, so a server does not expire the keys.
func start() time.Time {
	return time.Now().Truncate(time.Hour).Add(time.Hour)
}

// policy is limit per window under the scenario's algorithm; for GCRA, a
// rate of limit per window with a burst of limit, so that a key that has
// been idle may make limit requests at once, as under the window algorithms.
func (e *env) policy(limit int, window time.Duration) ratelimit.Policy {
	return policyOf(e.alg, limit, window)
}

func policyOf(alg ratelimit.Algorithm, limit int, window time.Duration) ratelimit.Policy {
	return ratelimit.NewPolicy(alg, limit, window)
}

// namespace is the key prefix of the scenario: random, so that scenarios and
// runs never see each other's keys on a shared server.
func (e *env) namespace() string {
	if e.prefix == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		e.prefix = "conformance:" + hex.EncodeToString(b[:]) + ":"
	}
	return e.prefix
}

// limiter returns a Limiter on a new store instance with the scenario's
// manual clock, prefix and a policy of limit per window.
func (e *env) limiter(limit int, window time.Duration, opts ...ratelimit.Option) *ratelimit.Limiter {
	if e.clock == nil {
		e.clock = NewManualClock(start())
	}
	opts = append([]ratelimit.Option{ratelimit.WithPrefix(e.namespace()), ratelimit.WithCallerClock(e.clock.Now), ratelimit.WithTimeout(budget),
		ratelimit.WithRetention(retention)}, opts...)
	l, err := ratelimit.New(e.newStore(e.t), e.policy(limit, window), opts...)
	mustNoError(e.t, err)
	return l
}

// realTimeLimiter is a limiter that lets the store use its own clock.
func (e *env) realTimeLimiter(limit int, window time.Duration) *ratelimit.Limiter {
	l, err := ratelimit.New(e.newStore(e.t), e.policy(limit, window), ratelimit.WithPrefix(e.namespace()), ratelimit.WithTimeout(budget))
	mustNoError(e.t, err)
	return l
}

// retention is the suite's Limiters': the longest window a scenario sets.
const retention = time.Hour

// budget is the time budget of the suite's Limiters: the suite checks what
// a store decides, not how fast, so a loaded machine (the race detector,
// every package's tests at once) must not turn slow calls into failures.
const budget = 10 * time.Second

// clearOfBoundary makes a fixed window (or a counter's) on the store's
// clock last at least need more, sleeping into the next window if it would
// end sooner, so that a short burst of calls is decided in one window. The
// other algorithms have no boundary: it returns at once.
func (e *env) clearOfBoundary(l *ratelimit.Limiter, need time.Duration) {
	if e.alg != ratelimit.FixedWindow && e.alg != ratelimit.SlidingWindowCounter {
		return
	}
	if e.alg == ratelimit.SlidingWindowCounter { // ResetAt is no window's end: ask a fixed window
		fixed, err := ratelimit.New(e.newStore(e.t), policyOf(ratelimit.FixedWindow, 1, l.Policy().Window), ratelimit.WithPrefix(e.namespace()), ratelimit.WithTimeout(budget))
		mustNoError(e.t, err)
		l = fixed
	}
	d, err := l.Peek(context.Background(), "boundary-probe") // an empty key: ResetAt is the window's end
	mustNoError(e.t, err)
	if left := d.ResetAt.Sub(d.At); left < need {
		time.Sleep(left + time.Millisecond)
	}
}

// checker replays every call on the reference model and compares.
type checker struct {
	t     *testing.T
	l     *ratelimit.Limiter
	model *Model
	clock *ManualClock
	ctx   context.Context
}

func (e *env) checked(limit int, window time.Duration, opts ...ratelimit.Option) *checker {
	l := e.limiter(limit, window, opts...)
	return &checker{t: e.t, l: l, model: NewModel(), clock: e.clock, ctx: context.Background()}
}

func (c *checker) request(key string, cost int) ratelimit.Request {
	return ratelimit.Request{Key: ratelimit.Key{Prefix: "m:", ID: key}, Policy: c.l.Policy(), Cost: cost,
		Clock: ratelimit.CallerClock, Now: c.clock.Now()}
}

// allowN calls AllowN and requires the model's decision.
func (c *checker) allowN(key string, n int) ratelimit.Decision {
	c.t.Helper()
	want := c.model.Take(c.request(key, n))
	got, err := c.l.AllowN(c.ctx, key, n)
	mustNoError(c.t, err, "AllowN(%q, %d)", key, n)
	mustDecide(c.t, want, got, "AllowN(%q, %d) at %v under %v", key, n, c.clock.Now().Format(time.StampMicro), c.l.Policy())
	return got
}

func (c *checker) allow(key string) ratelimit.Decision { c.t.Helper(); return c.allowN(key, 1) }

func (c *checker) peek(key string) ratelimit.Decision {
	c.t.Helper()
	want := c.model.Peek(c.request(key, 1))
	got, err := c.l.Peek(c.ctx, key)
	mustNoError(c.t, err, "Peek(%q)", key)
	mustDecide(c.t, want, got, "Peek(%q) at %v under %v", key, c.clock.Now().Format(time.StampMicro), c.l.Policy())
	return got
}

// refund calls Refund and requires the model's decision, or its refusal.
// A store that cannot refund must say so (errors.ErrUnsupported), and the
// model then does nothing either.
func (c *checker) refund(key string, n int) (ratelimit.Decision, bool) {
	c.t.Helper()
	if _, err := c.l.Refund(c.ctx, "refund-probe", 1); errors.Is(err, errors.ErrUnsupported) { // a key never taken from: refused if supported
		return ratelimit.Decision{}, false
	}
	want, ok := c.model.Refund(c.request(key, n))
	got, err := c.l.Refund(c.ctx, key, n)
	if !ok {
		mustErrorIs(c.t, err, ratelimit.ErrInvalidCost, "Refund(%q, %d) of more than is in use", key, n)
		return ratelimit.Decision{}, false
	}
	mustNoError(c.t, err, "Refund(%q, %d)", key, n)
	mustDecide(c.t, want, got, "Refund(%q, %d) at %v under %v", key, n, c.clock.Now().Format(time.StampMicro), c.l.Policy())
	return got, true
}

func (c *checker) reset(key string) {
	c.t.Helper()
	c.model.Reset(ratelimit.Key{Prefix: "m:", ID: key})
	mustNoError(c.t, c.l.Reset(c.ctx, key), "Reset(%q)", key)
}

func (c *checker) setPolicy(p ratelimit.Policy) {
	c.t.Helper()
	mustNoError(c.t, c.l.SetPolicy(p))
}
