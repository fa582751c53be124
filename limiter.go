package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Limiter applies a Policy to keys on a Store. It is safe for concurrent use;
// several Limiters (in one process or many) on one shared store enforce one
// limit together.
type Limiter struct {
	store    Store
	policy   atomic.Pointer[Policy]
	prefix   string
	clock    func() time.Time // nil: the store's clock
	name     string
	observer Observer
	failOpen bool
	dryRun   bool
	plain    bool          // none of observer, failOpen, dryRun, policyFunc: the shortest path
	timeout  time.Duration // the time budget of a store call; 0 for an in-process store
	// retention is how long a key's state is kept after a write: the
	// longest window any of the Limiter's policies may have.
	retention  time.Duration
	policyFunc PolicyFunc
	deadlines
}

// PolicyFunc picks the policy of a key (its customer's tier, say), for a
// Limiter built WithPolicyFunc. Returning the zero Policy applies the
// Limiter's own (New, SetPolicy). An error, or an invalid policy, fails the
// call with an error wrapping ErrInvalidPolicy, recording nothing.
type PolicyFunc func(ctx context.Context, key string) (Policy, error)

// DefaultTimeout is the time budget of a store call unless WithTimeout says
// otherwise: far above what a healthy Redis or Valkey needs (p99.9 of 3 to 9
// ms, the slowest call 19 ms, at 64 goroutines on a busy 2-core machine with
// `go run ./bench -backend all`), and short enough that a stalled server
// does not stall the service that asks it.
const DefaultTimeout = 100 * time.Millisecond

// Option configures a Limiter.
type Option func(*Limiter)

// WithPrefix sets the namespace of every key the Limiter writes (default
// DefaultPrefix), at most MaxPrefixLen bytes, any bytes. Limiters with
// different prefixes never share state.
func WithPrefix(prefix string) Option { return func(l *Limiter) { l.prefix = prefix } }

// WithCallerClock makes the Limiter decide every request at now() (sent to
// the store as Request.Now with CallerClock) instead of letting the store
// use its own clock. On Redis and Valkey the default (the server's clock)
// keeps instances with skewed clocks on one window; use a caller's clock for
// tests, or when a network store must not call TIME.
func WithCallerClock(now func() time.Time) Option { return func(l *Limiter) { l.clock = now } }

// WithName names the Limiter's policy ("per-user", "per-ip"...) in Events
// and in Multi's decisions.
func WithName(name string) Option { return func(l *Limiter) { l.name = name } }

// WithObserver calls o after every decision (see Observer). With no
// observer, nothing is measured.
func WithObserver(o Observer) Option { return func(l *Limiter) { l.observer = o } }

// WithTimeout bounds every call to the store to d (default DefaultTimeout):
// a call whose context has no earlier deadline gets one, so that a stalled
// server costs each caller at most d, and the store's error (wrapping
// context.DeadlineExceeded) goes to the failure mode. An earlier deadline of
// the caller's is kept, and its values; a cancellation of the caller's that
// comes while the store call is in flight is seen at the budget's end. A store that decides in process (an InProcessStore,
// such as the memory store) gets no time budget: it has no I/O to wait on.
// d must be positive.
func WithTimeout(d time.Duration) Option { return func(l *Limiter) { l.timeout = d } }

// WithFailOpen admits requests when the store fails (server down, timeout,
// cancelled context): the caller gets an allowed Decision with Source
// SourceFailOpen and a nil error, and the store's error goes to the observer.
// Nothing is recorded. By default a Limiter fails closed: the caller gets
// the error, wrapping ErrStore. Bad input is never admitted.
func WithFailOpen() Option { return func(l *Limiter) { l.failOpen = true } }

// WithDryRun makes the Limiter admit every request while deciding and
// recording as usual: the observer sees the real decision (Event.Decision),
// the caller an allowed one. For rolling out a new limit.
func WithDryRun() Option { return func(l *Limiter) { l.dryRun = true } }

// WithRetention keeps every key's state for at least d after its last write
// (default: the window of the policy New is given), so that a later policy
// with a window up to d (SetPolicy, or a key's policy from WithPolicyFunc)
// still finds the whole history: a server's TTLs and the memory store's
// sweeper go by it. A policy with a longer window than the retention is
// refused with ErrInvalidPolicy, since history it should count may already
// be gone. Keeping state longer costs memory for keys that went idle.
func WithRetention(d time.Duration) Option { return func(l *Limiter) { l.retention = d } }

// WithPolicyFunc makes the Limiter pick each key's policy with f, on every
// call: higher limits for paying customers, a tier that changes at run time,
// without a Limiter per tier. A key's new policy applies at once with its
// history, as SetPolicy does; policies of different algorithms keep their
// state apart. Set WithRetention to the longest window f may return.
func WithPolicyFunc(f PolicyFunc) Option { return func(l *Limiter) { l.policyFunc = f } }

// New returns a Limiter applying p on store.
func New(store Store, p Policy, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidArgument)
	}
	l := &Limiter{store: store, prefix: DefaultPrefix, timeout: DefaultTimeout}
	for _, o := range opts {
		o(l)
	}
	if err := validatePrefix(l.prefix); err != nil {
		return nil, err
	}
	if l.timeout <= 0 {
		return nil, fmt.Errorf("%w: timeout %v is not positive", ErrInvalidArgument, l.timeout)
	}
	if s, ok := store.(InProcessStore); ok && s.InProcess() {
		l.timeout = 0
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if l.retention == 0 {
		l.retention = p.Window.Truncate(time.Microsecond)
	}
	if l.retention < 0 || l.retention > MaxWindow {
		return nil, fmt.Errorf("%w: retention %v is not in (0, MaxWindow]", ErrInvalidArgument, l.retention)
	}
	if err := l.SetPolicy(p); err != nil {
		return nil, err
	}
	l.plain = l.observer == nil && !l.failOpen && !l.dryRun && l.policyFunc == nil
	return l, nil
}

// SetPolicy replaces the policy. It applies to every key on its next call,
// with the history recorded so far: lowering a limit denies a key already
// over the new limit at once; nothing is reset. A new window length
// re-reads a sliding log under the new length (it holds what the last
// window kept); a fixed window whose aligned start changes starts a fresh
// count; a GCRA bucket keeps the requests' worth it holds (at most a burst).
// A window longer than the retention (WithRetention) is refused, as history
// it should count may be gone. Changing the algorithm switches to state kept
// apart (the old state expires by itself). An invalid p changes nothing.
func (l *Limiter) SetPolicy(p Policy) error {
	p, err := l.check(p)
	if err != nil {
		return err
	}
	l.policy.Store(&p)
	return nil
}

// check validates p for this Limiter and returns it with its window to the
// microsecond.
func (l *Limiter) check(p Policy) (Policy, error) {
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	p.Window = p.Window.Truncate(time.Microsecond)
	if p.Window > l.retention {
		return Policy{}, fmt.Errorf("%w: window %v is longer than the Limiter's retention %v, so history it should count may be gone: build the Limiter WithRetention", ErrInvalidPolicy, p.Window, l.retention)
	}
	return p, nil
}

// policyOf is the policy of key: the PolicyFunc's, or the Limiter's.
func (l *Limiter) policyOf(ctx context.Context, key string) (Policy, error) {
	if l.policyFunc == nil {
		return *l.policy.Load(), nil
	}
	p, err := l.policyFunc(ctx, key)
	if err != nil {
		return Policy{}, fmt.Errorf("%w: the policy of %q: %w", ErrInvalidPolicy, key, err)
	}
	if p == (Policy{}) {
		return *l.policy.Load(), nil
	}
	if p, err = l.check(p); err != nil {
		return Policy{}, fmt.Errorf("the policy of %q: %w", key, err)
	}
	return p, nil
}

// Policy returns the Limiter's policy: the one in force for every key, or,
// WithPolicyFunc, for the keys it leaves to the Limiter.
func (l *Limiter) Policy() Policy { return *l.policy.Load() }

// Name is the name given with WithName.
func (l *Limiter) Name() string { return l.name }

// Allow is AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN decides whether key may make n requests now, and records them if
// so. n must be in [1, Policy.MaxCost()] (a larger n could never be
// admitted): anything else is ErrInvalidCost with nothing recorded. A denial
// records nothing. When the store fails, the failure mode answers
// (WithFailOpen), or the error is returned, wrapping ErrStore.
func (l *Limiter) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	if err := checkArgs(ctx, key); err != nil {
		return Decision{}, err
	}
	if l.plain && l.timeout == 0 && l.clock == nil {
		// The hot path: an in-process store on its own clock. The request
		// is built in the call from plain fields, not copied through
		// helpers, and the store's answer is returned as it is.
		p := l.policy.Load()
		if n < 1 || n > p.MaxCost() {
			return Decision{}, p.checkCost(n)
		}
		d, err := l.store.Take(ctx, Request{Key: Key{l.prefix, key}, Policy: *p, Cost: n, Retain: l.retention})
		if err != nil {
			return Decision{}, storeError(err)
		}
		return d, nil
	}
	p, err := l.policyOf(ctx, key)
	if err != nil {
		return Decision{}, err
	}
	if err := p.checkCost(n); err != nil {
		return Decision{}, err
	}
	req, err := l.request(key, p, n)
	if err != nil {
		return Decision{}, err
	}
	return l.take(ctx, req)
}

// Peek reports key's quota without consuming any: Allowed tells whether a
// request of cost 1 would be admitted now, Remaining how many would. It
// records nothing. Failures are handled as for AllowN.
func (l *Limiter) Peek(ctx context.Context, key string) (Decision, error) {
	if err := checkArgs(ctx, key); err != nil {
		return Decision{}, err
	}
	p, err := l.policyOf(ctx, key)
	if err != nil {
		return Decision{}, err
	}
	req, err := l.request(key, p, 1)
	if err != nil {
		return Decision{}, err
	}
	return l.peek(ctx, req)
}

// Refund gives back n of the quota key has in use, for a request that was
// admitted and then not served (the upstream failed, a cache answered), and
// returns what Peek would say afterwards. Under each algorithm it undoes
// what the admission did, as far as time has not already:
//   - SlidingWindow: the n newest units of the log are dropped;
//   - FixedWindow: the current window's count goes down by n;
//   - SlidingWindowCounter: the current window's count, then the previous
//     window's (where a request weighs less), go down by n in all;
//   - GCRA: the bucket's level goes down by n requests' worth (to empty at
//     most).
//
// n must be in [1, MaxCost()] and at most what the key has in use (for
// GCRA, what has not drained yet): otherwise nothing changes and the error
// wraps ErrInvalidCost. Refunds are not observed, and a store failure is
// returned, wrapping ErrStore, whatever the failure mode. The store must be
// a RefundStore (every store in this module is); otherwise the error wraps
// errors.ErrUnsupported.
func (l *Limiter) Refund(ctx context.Context, key string, n int) (Decision, error) {
	if err := checkArgs(ctx, key); err != nil {
		return Decision{}, err
	}
	p, err := l.policyOf(ctx, key)
	if err != nil {
		return Decision{}, err
	}
	if err := p.checkCost(n); err != nil {
		return Decision{}, err
	}
	rs, ok := l.store.(RefundStore)
	if !ok {
		return Decision{}, fmt.Errorf("ratelimit: the store %T cannot refund: %w", l.store, errors.ErrUnsupported)
	}
	req, err := l.request(key, p, n)
	if err != nil {
		return Decision{}, err
	}
	sctx, cancel := l.budget(ctx, time.Now())
	defer cancel()
	d, err := rs.Refund(sctx, req)
	switch {
	case errors.Is(err, ErrInvalidCost):
		return Decision{}, err
	case err != nil:
		return Decision{}, storeError(err)
	}
	return d, nil
}

// Reset forgets key's history under every algorithm: its full quota is
// available at once. A store failure is returned, wrapping ErrStore,
// whatever the failure mode; the time budget applies.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := checkArgs(ctx, key); err != nil {
		return err
	}
	sctx, cancel := l.budget(ctx, time.Now())
	defer cancel()
	if err := l.store.Reset(sctx, Key{l.prefix, key}); err != nil {
		return storeError(err)
	}
	return nil
}

// Wait is WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) (Decision, error) {
	return l.WaitN(ctx, key, 1)
}

// WaitN blocks until key may make n requests, records them and returns the
// admitting Decision. After each denial it sleeps for the denial's
// RetryAfter (in real time) and asks again: other callers may take the
// freed quota first, so a wait can take several rounds. It returns at once,
// with an error wrapping context.DeadlineExceeded, when the context's
// deadline comes before the request could fit, and with ctx.Err() when the
// context is done while waiting. Other errors are as for AllowN, and a
// failure mode's admission (WithFailOpen) ends the wait at once.
func (l *Limiter) WaitN(ctx context.Context, key string, n int) (Decision, error) {
	var timer *time.Timer
	for {
		d, err := l.AllowN(ctx, key, n)
		if err != nil || d.Allowed {
			return d, err
		}
		wait := max(d.RetryAfter, time.Microsecond)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return Decision{}, fmt.Errorf("ratelimit: %q would wait %v, past the context's deadline: %w", key, wait, context.DeadlineExceeded)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return Decision{}, ctx.Err()
		}
	}
}

// request is a request of cost n for key under p. A caller's clock outside
// [MinTime, MaxTime] is refused here, before any I/O.
func (l *Limiter) request(key string, p Policy, n int) (Request, error) {
	req := Request{Key: Key{l.prefix, key}, Policy: p, Cost: n, Clock: l.clockKind(), Now: l.now(), Retain: l.retention}
	if req.Clock == CallerClock {
		if err := ValidateTime(req.Now); err != nil {
			return Request{}, err
		}
	}
	return req, nil
}

// take asks the store to decide req, and settles its answer.
func (l *Limiter) take(ctx context.Context, req Request) (Decision, error) {
	began := time.Now()
	sctx, cancel := l.budget(ctx, began)
	d, err := l.store.Take(sctx, req)
	cancel()
	return l.settle(ctx, req, false, d, err, began)
}

// peek asks the store what it would decide for req, and settles its answer.
func (l *Limiter) peek(ctx context.Context, req Request) (Decision, error) {
	began := time.Now()
	sctx, cancel := l.budget(ctx, began)
	d, err := l.store.Peek(sctx, req)
	cancel()
	return l.settle(ctx, req, true, d, err, began)
}

// budget is ctx bounded by the time budget from now (see budgetCtx), unless
// it ends sooner already or is done.
func (l *Limiter) budget(ctx context.Context, now time.Time) (context.Context, context.CancelFunc) {
	if l.timeout == 0 || ctx.Err() != nil {
		return ctx, noCancel
	}
	deadline := now.Add(l.timeout)
	if d, ok := ctx.Deadline(); ok && !d.After(deadline) {
		return ctx, noCancel
	}
	return &budgetCtx{Context: ctx, deadline: deadline, done: l.deadlines.done(deadline)}, noCancel
}

func noCancel() {}

// settle turns what the store said into what the caller gets: the failure
// mode answers for a failed store, dry-run admits, and the observer sees it
// all.
func (l *Limiter) settle(ctx context.Context, req Request, peek bool, d Decision, err error, began time.Time) (Decision, error) {
	if err != nil {
		err = storeError(err)
		d = Decision{}
		// A cost the store says can never fit (a guard's share while its
		// primary is down) is bad input for now, and an algorithm the store
		// does not support a mistake of configuration: never admitted.
		if l.failOpen && !errors.Is(err, ErrInvalidCost) && !errors.Is(err, errors.ErrUnsupported) {
			d = Decision{Allowed: true, Limit: req.Policy.MaxCost(), At: began, Source: SourceFailOpen}
		}
	}
	if l.observer != nil {
		l.observer.Observe(ctx, Event{Name: l.name, Policy: req.Policy, Key: req.Key.ID, Cost: req.Cost, Peek: peek,
			Decision: d, Err: err, Latency: time.Since(began), DryRun: l.dryRun})
	}
	switch {
	case err != nil && !d.Allowed:
		return Decision{}, err
	case l.dryRun && !d.Allowed:
		d.Allowed, d.RetryAfter = true, 0
	}
	return d, nil
}

// clockKind is the clock the Limiter's requests are decided on.
func (l *Limiter) clockKind() Clock {
	if l.clock == nil {
		return StoreClock
	}
	return CallerClock
}

// now is the caller's time under WithCallerClock, else the zero time (which
// the store ignores).
func (l *Limiter) now() time.Time {
	if l.clock == nil {
		return time.Time{}
	}
	return l.clock()
}

// checkArgs validates the arguments common to every call.
func checkArgs(ctx context.Context, key string) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	return ValidateKey(key)
}
