// Package conformance is the executable specification of a backend.Store.
// Every backend in this module runs it from its tests; so should yours:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t *testing.T) backend.Store {
//			return mystore.New(newClient(t)) // a new client on the same server
//		})
//	}
//
// Run is RunStore and RunLimiter. RunStore drives the contract directly:
// every scenario sends backend.Requests under rules it compiles and compares
// every Outcome, field by field (all but Life), with Model, the reference
// implementation of the rules. RunLimiter checks what a ratelimit.Limiter
// adds on the store: bad input, budgets and failure modes, Multi, policies
// per key. Each calls newStore one or more times in each subtest. Every
// store returned within one subtest must share state, as app instances
// share one server: for a network store, return a new client of the same
// server each time; for an in-process store, wrap the constructor with
// InProcess. Subtests write under their own random key prefix, so a server
// needs no flushing between them; release what you open with t.Cleanup.
//
// Most scenarios decide at times of the kit's own clock (a Request's Now);
// those that test the store's own clock use real time with short windows
// and explicit margins, so the suite also holds on a server that keeps its
// own time. A store that decides several requests together (its TakeAll
// is not backend.Unimplemented's) has its TakeAll checked too, one that
// peeks at several its PeekAll, one that charges several its ChargeAll,
// one that refunds its Refund, and one that drops state by itself (a TTL, a sweeper) shows
// the kit with Expire that it keeps what it must. Benchmark measures a
// store the way this module's backends are measured. The kit uses plain
// testing only.
package conformance

import (
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
)

// NewStore returns a Store sharing state with every other Store it returned
// in the same test t.
type NewStore func(t *testing.T) backend.Store

// InProcess adapts the constructor of an in-process store, whose instances
// cannot share state: within one test, every call returns the store the first
// call made.
func InProcess(newStore NewStore) NewStore {
	var mu sync.Mutex
	stores := map[*testing.T]backend.Store{}
	return func(t *testing.T) backend.Store {
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

// Run is RunStore then RunLimiter.
func Run(t *testing.T, newStore NewStore, opts ...Option) {
	RunStore(t, newStore, opts...)
	RunLimiter(t, newStore, opts...)
}

// RunStore runs the scenarios of the contract against stores from newStore,
// once for each algorithm the store supports (every one unless Supports
// says otherwise), as subtests named after the behaviour they require.
func RunStore(t *testing.T, newStore NewStore, opts ...Option) {
	run(t, newStore, storeScenarios, true, opts)
	c := optionsOf(opts)
	runPermits(t, newStore, c)
	if len(c.algorithms) < len(backend.Algorithms()) {
		t.Run("refuses the algorithms it does not support", func(t *testing.T) { refusesUnsupported(t, newStore, c.algorithms) })
	}
}

// RunLimiter runs the scenarios of what a Limiter adds, on stores from
// newStore.
func RunLimiter(t *testing.T, newStore NewStore, opts ...Option) {
	run(t, newStore, limiterScenarios, false, opts)
}

func run(t *testing.T, newStore NewStore, scenarios []scenario, direct bool, opts []Option) {
	c := optionsOf(opts)
	for _, alg := range c.algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) {
					sc.run(t, &env{t: t, newStore: newStore, alg: alg, algorithms: c.algorithms, direct: direct, expire: c.expire})
				})
			}
		})
	}
}

func optionsOf(opts []Option) options {
	c := options{algorithms: backend.Algorithms()}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// Option changes what Run checks.
type Option func(*options)

type options struct {
	algorithms []backend.Algorithm
	expire     ExpireFunc
}

// Supports says which algorithms the store decides; the others it must
// refuse, recording nothing, with an error wrapping errors.ErrUnsupported
// (checked too). Scenarios that cross algorithms use only these.
func Supports(algs ...backend.Algorithm) Option {
	return func(c *options) { c.algorithms = algs }
}

// ExpireFunc makes store drop, as it would by itself (a TTL, a sweeper),
// every state that has expired once its clock reads the store's creation
// plus elapsed: the total the kit's clock has moved since the scenario
// began (it grows from one call to the next). From the first call on, the
// store's clock follows the kit's alone (creation plus elapsed), not real
// time: on a busy machine more real time passes between two of the kit's
// steps than the kit moves its clock, and a store whose clock runs ahead
// of the kit's drops state the kit still counts. The memory store's test
// and the example store (example_store_test.go) show how; a store that
// keeps state by a server's TTL ages every TTL by what the kit's clock moved
// less the real time that passed since the last call (the Redis and Valkey
// stores' tests do, with one script over the keyspace of a server of their
// own).
type ExpireFunc func(t *testing.T, store backend.Store, elapsed time.Duration)

// Expire is for a store that drops state by itself: the kit moves its clock,
// has the store expire what it would by then with f, and checks that
// nothing is over-admitted (a GCRA bucket kept for less than it takes to
// drain would let a second burst through).
func Expire(f ExpireFunc) Option { return func(c *options) { c.expire = f } }

type scenario struct {
	name string
	run  func(*testing.T, *env)
}

var storeScenarios = []scenario{
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
	{"refuses a cost or a time it cannot decide exactly, recording nothing", refusesWhatItCannotDecide},
	{"matches the reference model on random traffic", matchesModel},
	{"matches the reference model at limits of tens", matchesModelAtLimitsOfTens},
	{"matches the reference model at limits of hundreds", matchesModelAtLimitsOfHundreds},
	{"never over-admits under concurrency across instances", noOverAdmission},
	{"never over-admits in any window under load (64 goroutines, 4 instances)", noOverAdmissionInAnyWindow},
	{"TakeAll admits together or records nothing under load (16 goroutines, 4 instances)", takeAllUnderLoad},
	{"uses the store's own clock when it is asked to", storeClock},
	{"peek at any cost decides as take would and records nothing", peekRecordsNothing},
	{"reset clears the key under every algorithm, and only that key", resetClearsEveryAlgorithm},
	{"TakeAll admits several policies on one key together or not at all", takeAllIsAtomic},
	{"PeekAll says what each Peek says, and records nothing", peekAllSaysWhatEachPeekSays},
	{"ChargeAll charges each request as its Charge would", chargeAllChargesAsEachChargeDoes},
	{"limits and costs at their bounds neither overflow nor over-admit", atTheBounds},
	{"a fixed window may be a year long", aYearLongFixedWindow},
	{"state from a clock that stepped back holds nothing past one window", clockStepsBack},
	{"clocks skewed by up to MaxSkew share one timeline per key", skewedClocksShareOneTimeline},
	{"a longer window keeps the history the store kept", longerWindowKeepsHistory},
	{"a policy change on a partly drained key keeps whole requests", rateChangeKeepsWholeRequests},
	{"a refund gives back exactly what was taken, and no more", refunds},
	{"a charge past the limit is remembered until it has left or drained", chargesPastTheLimit},
	{"a check takes nothing; a charge takes what was used", checksTakeNothing},
	{"undo gives back the admission it names, not the newest", undoesTheAdmissionItNames},
	{"a denied key stays blocked for the penalty box; Reset lifts it", aDenialBlocksTheKey},
	{"only a denial or a charge past the quota blocks; a refund lifts nothing", onlyDenialsBlock},
	{"a live policy change keeps a block until it ends", aLivePolicyKeepsTheBlock},
	{"TakeAll blocks the key it denies and records nothing else", takeAllBlocksWhatItDenies},
	{"state is kept as long as it counts, whatever the store expires", keepsWhatCounts},
	{"state is kept for the rule's retention, for a longer window to come", keepsForItsRetention},
	{"state a store drops by its own clock is kept KeepSlack longer", keepsTheSlack},
}

var limiterScenarios = []scenario{
	{"rejects invalid input and records nothing", rejectsInvalidInput},
	{"a cancelled context returns promptly with an error", cancelledContext},
	{"a failure mode's decision says so and comes without an error", failureModeAnswers},
	{"Multi: a denial takes nothing from the other policies", multiDenialTakesNothing},
	{"Multi: every answer is the model's, each policy observed once", multiAnswersAsTheModel},
	{"Multi: a check takes nothing; usage is charged after", multiChecksThenCharges},
	{"a policy per key applies at once with the key's history", policyPerKey},
}
