// Package guard keeps a Limiter limiting when its store is slow or gone. It
// is a backend.Store that wraps another (the primary: Redis, Valkey, any
// backend) with a circuit breaker and, optionally, a local fallback store.
//
// While the primary answers, guard passes every call through and changes
// nothing: it passes the conformance suite like any store. When calls fail
// (errors, or timeouts under the Limiter's time budget) Failures times in a
// row, the breaker opens: for CoolDown, calls no longer go to the primary and
// are answered at once. Then one call at a time is let through as a probe
// (half-open); the first that succeeds closes the breaker, and decisions go
// back to the primary.
//
// Who answers while the primary cannot:
//
//   - With WithFallback (the degraded local mode), an in-process store
//     (backend/memory) decides under this instance's share of the policy:
//     Limit/instances when the limit is shared by that many app instances,
//     so that together they stay within about the global limit. Such a
//     decision's Source is SourceFallback (package ratelimit). Counts made locally are
//     not merged back into the primary when it returns: for up to one window
//     after recovery a key may get its primary's remaining quota on top of
//     what it used locally (at most its share more), and the primary keeps
//     whatever it held before the outage.
//   - Without a fallback, the call fails at once with an error wrapping
//     ErrOpen (and backend.ErrStore), and the Limiter's failure mode
//     answers: fail closed (the error) or fail open (an admission).
//
// On a cluster (a primary whose backend.Info names the node of each key, as
// the Redis and Valkey backends do on cluster clients) each node has a
// breaker of its own: a key goes to the fallback only while the node that owns its slot
// fails, and the keys of healthy nodes stay exact. A probe that lands on a
// healthy node closes nothing of a failing one. Keys whose node the store
// cannot name share the breaker of the whole store.
//
// A call whose caller went away (its context cancelled, or past a deadline
// of its own, before or during the primary's call) gets the store's error,
// and is neither a success nor a failure of the primary: a caller with a
// deadline shorter than the primary needs cannot open the breaker for
// everyone. The guard learns of a primary that stalls from the calls whose
// Limiter's time budget runs out: give every Limiter a budget shorter than
// its callers' deadlines (WithTimeout). The Limiter's time budget is told apart from the
// caller's own deadline by its cause, backend.ErrBudget: a budget that runs out
// during the primary's call is the primary's failure, and one that ran out
// before it (a budget shorter than the wait for the CPU) leaves the call to
// the fallback, which answers whenever the primary could not. Reset goes to
// the primary (through the breaker) and always to the fallback.
package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/owner"
)

// ErrOpen is wrapped by the errors of calls that the open breaker kept from
// the primary when there is no fallback to answer them.
var ErrOpen = errors.New("ratelimit/guard: circuit breaker open")

// Defaults of the breaker.
const (
	// DefaultFailures is how many calls must fail in a row to open the
	// breaker.
	DefaultFailures = 5
	// DefaultCoolDown is how long the breaker stays open before it lets a
	// probe through.
	DefaultCoolDown = time.Second
)

// State is the breaker's state.
type State uint8

const (
	// Closed: calls go to the primary.
	Closed State = iota
	// HalfOpen: one call at a time goes to the primary as a probe; the
	// others are answered as when open.
	HalfOpen
	// Open: no call goes to the primary.
	Open
)

// String returns "closed", "half-open" or "open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Store is the guarded backend.Store. It does not own the primary or the
// fallback: close them when done.
type Store struct {
	primary  backend.Store
	fallback backend.Store
	share    func(limit, burst int64) (int64, int64)
	// breaker watches the whole primary; on a cluster (node, from the
	// primary's Info) it stands for the keys whose node the store cannot
	// name, and nodes has a breaker for each node it names.
	breaker *breaker
	node    func(prefix, key string) string
	nodes   sync.Map // node name → *breaker
	info    backend.Info
	owned   *owner.Key // the fallback's share, kept with each rule
}

// Store is a whole store: every operation of the contract.
var _ backend.Store = (*Store)(nil)

// New returns primary guarded by a breaker, with the options' fallback.
func New(primary backend.Store, opts ...Option) (*Store, error) {
	c := config{name: "guard", failures: DefaultFailures, coolDown: DefaultCoolDown}
	for _, o := range opts {
		o(&c)
	}
	switch {
	case c.err != nil:
		return nil, c.err
	case primary == nil:
		return nil, fmt.Errorf("ratelimit/guard: %w: nil primary store", backend.ErrInvalidArgument)
	case c.failures < 1:
		return nil, fmt.Errorf("ratelimit/guard: %w: %d failures open the breaker, want at least 1", backend.ErrInvalidArgument, c.failures)
	case c.coolDown <= 0:
		return nil, fmt.Errorf("ratelimit/guard: %w: cool-down %v is not positive", backend.ErrInvalidArgument, c.coolDown)
	case c.share != nil && c.fallback == nil:
		return nil, fmt.Errorf("ratelimit/guard: %w: a local share without a fallback store", backend.ErrInvalidArgument)
	}
	s := &Store{primary: primary, fallback: c.fallback, share: c.share, owned: owner.New()}
	if s.share == nil {
		instances := int64(c.instances)
		s.share = func(limit, burst int64) (int64, int64) {
			if burst > 0 {
				burst = max(1, burst/instances)
			}
			return max(1, limit/instances), burst
		}
	}
	s.breaker = &breaker{threshold: int64(c.failures), coolDown: c.coolDown, name: c.name, onChange: c.onStateChange}
	pi := primary.Info()
	s.node = pi.Node
	// In process when the primary and the fallback are (a Limiter then
	// sets no time budget, which an in-process primary could fail only for
	// want of CPU); the primary's nodes and changes, as the primary's: the
	// changes made through a guard while its primary cannot be reached are
	// the fallback's, local to this instance; penalty boxes if both keep
	// them.
	s.info = backend.Info{InProcess: pi.InProcess && (s.fallback == nil || s.fallback.Info().InProcess), Node: pi.Node, Changes: pi.Changes,
		Blocks: pi.Blocks && (s.fallback == nil || s.fallback.Info().Blocks)}
	return s, nil
}

// Info implements backend.Store: as the primary's (in process only if the
// fallback is too).
func (s *Store) Info() backend.Info { return s.info }

// judge says what err tells of the primary's health.
func judge(ctx context.Context, err error) outcome {
	switch {
	case err == nil:
		return success
	case callerGone(ctx), answered(err):
		return excluded
	}
	return failure
}

// answered reports an error that is the store's answer, not its failure: a
// refund of more than is in use, input it refuses (bad input is validated
// once, by the store: its refusal is neither a success nor a failure), a
// call the store does not support.
func answered(err error) bool {
	return errors.Is(err, backend.ErrInvalidCost) || errors.Is(err, backend.ErrInvalidArgument) ||
		errors.Is(err, backend.ErrInvalidKey) || errors.Is(err, backend.ErrInvalidPolicy) ||
		errors.Is(err, errors.ErrUnsupported)
}

var errNoRule = fmt.Errorf("ratelimit/guard: %w: a request without a rule", backend.ErrInvalidArgument)

// State is the breaker's state now, the most severe of its breakers' on a
// cluster (one per node). An open breaker whose cool-down has passed turns
// half-open on the next call.
func (s *Store) State() State {
	worst := State(s.breaker.state.Load())
	s.nodes.Range(func(_, b any) bool {
		worst = max(worst, State(b.(*breaker).state.Load()))
		return true
	})
	return worst
}

// breakerFor is the breaker of the node that decides key under prefix: on
// a cluster, that node's own, so that one node's failure sends only its
// keys to the fallback; otherwise the whole store's.
func (s *Store) breakerFor(prefix, key string) *breaker {
	if s.node == nil {
		return s.breaker
	}
	node := s.node(prefix, key)
	if node == "" {
		return s.breaker
	}
	if b, ok := s.nodes.Load(node); ok {
		return b.(*breaker)
	}
	b, _ := s.nodes.LoadOrStore(node, &breaker{threshold: s.breaker.threshold, coolDown: s.breaker.coolDown,
		name: s.breaker.name + " " + node, onChange: s.breaker.onChange})
	return b.(*breaker)
}

// Take implements backend.Store.
func (s *Store) Take(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.decide(ctx, req, call{do: backend.Store.Take})
}

// Peek implements backend.Store.
func (s *Store) Peek(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.decide(ctx, req, call{do: backend.Store.Peek})
}

// Refund implements backend.Store: the primary refunds through the
// breaker, or the fallback refunds what it holds while the primary cannot.
// A store that cannot refund answers errors.ErrUnsupported.
func (s *Store) Refund(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.decide(ctx, req, call{do: backend.Store.Refund})
}

// Charge implements backend.Store: the primary records the usage through
// the breaker, or the fallback, on this instance's share, while the
// primary cannot. A store that cannot charge answers errors.ErrUnsupported.
func (s *Store) Charge(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.decide(ctx, req, call{do: backend.Store.Charge, charge: true})
}

// Acquire implements backend.Store: the primary's permits through the
// breaker, or while it cannot answer, the fallback's (this instance's share
// of them). A store that cannot hold permits answers errors.ErrUnsupported.
func (s *Store) Acquire(ctx context.Context, req backend.Request, id int64) (backend.Outcome, error) {
	return s.decide(ctx, req, call{permit: id, do: func(st backend.Store, ctx context.Context, req backend.Request) (backend.Outcome, error) {
		return st.Acquire(ctx, req, id)
	}})
}

// Release implements backend.Store, as Acquire.
func (s *Store) Release(ctx context.Context, req backend.Request, id int64) (backend.Outcome, error) {
	return s.decide(ctx, req, call{permit: id, do: func(st backend.Store, ctx context.Context, req backend.Request) (backend.Outcome, error) {
		return st.Release(ctx, req, id)
	}})
}

// call is an operation the guard passes on: the store's method, whether
// its cost may pass the rule's MaxCost (a charge's), and the permit it
// acquires or releases (0: none).
type call struct {
	do     func(backend.Store, context.Context, backend.Request) (backend.Outcome, error)
	charge bool
	permit int64
}

// validate checks req for the call, as the store would (see local).
func (c call) validate(req *backend.Request) error {
	switch {
	case c.charge:
		return req.ValidateCharge()
	case c.permit != 0:
		return req.ValidateAcquire(c.permit)
	}
	return req.Validate()
}

func (s *Store) decide(ctx context.Context, req backend.Request, do call) (backend.Outcome, error) {
	if req.Rule == nil { // the one field the guard reads; the rest is the store's to validate
		return backend.Outcome{}, errNoRule
	}
	if err := ctx.Err(); err != nil {
		if callerDone(ctx) { // the caller went away, or its own deadline passed
			return backend.Outcome{}, err
		}
		// The Limiter's budget ran out before the primary was asked: it
		// could not answer in time, and the fallback answers. The breaker
		// hears nothing: the primary was not tried.
		return s.local(ctx, req, do, fmt.Errorf("ratelimit/guard: the time budget ran out before the call: %w: %w", backend.ErrStore, err))
	}
	b := s.breakerFor(req.Rule.Prefix(), req.Key)
	ok, probe := b.allow()
	if !ok {
		return s.local(ctx, req, do, fmt.Errorf("%w: %w", ErrOpen, backend.ErrStore))
	}
	d, err := do.do(s.primary, ctx, req)
	b.done(probe, judge(ctx, err))
	if err == nil || answered(err) || callerGone(ctx) {
		return d, err
	}
	return s.local(ctx, req, do, err)
}

// Reset implements backend.Store: the key is forgotten by the fallback,
// and by the primary through the breaker (an open breaker is an error
// wrapping ErrOpen).
func (s *Store) Reset(ctx context.Context, prefix, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var local error
	if s.fallback != nil {
		local = s.fallback.Reset(context.WithoutCancel(ctx), prefix, key)
	}
	b := s.breakerFor(prefix, key)
	ok, probe := b.allow()
	if !ok {
		return errors.Join(fmt.Errorf("%w: %w", ErrOpen, backend.ErrStore), local)
	}
	err := s.primary.Reset(ctx, prefix, key)
	b.done(probe, judge(ctx, err))
	return errors.Join(err, local)
}

// callerGone reports a call that failed for the caller's doing, not the
// primary's: its context was cancelled, or its own deadline passed (not
// the Limiter's budget, whose cause is backend.ErrBudget). A client may
// notice a deadline on its connection a moment before the context's timer
// says so; a context past its deadline is waited for, briefly, to learn
// whose deadline it was.
func callerGone(ctx context.Context) bool {
	if ctx.Err() == nil {
		d, ok := ctx.Deadline()
		if !ok || time.Now().Before(d) {
			return false
		}
		<-ctx.Done() // closes once its timer runs
	}
	return callerDone(ctx)
}

// callerDone reports a context whose caller's own part is done (cancelled,
// or past a deadline of the caller's), as opposed to a Limiter's time
// budget that ran out (its cause is backend.ErrBudget).
func callerDone(ctx context.Context) bool {
	return ctx.Err() != nil && !errors.Is(context.Cause(ctx), backend.ErrBudget)
}
