package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/ratelimit-go/ratelimit/backend"
)

// Limiter applies a Policy to keys on a store. It is safe for concurrent use;
// several Limiters (in one process or many) on one shared store enforce one
// limit together.
type Limiter struct {
	store    backend.Store
	policy   atomic.Pointer[compiled]
	prefix   string
	clock    func() time.Time // nil: the store's clock
	name     string
	observer Observer
	failOpen bool
	dryRun   bool
	// direct: nothing to settle (no observer, failure mode, dry run or
	// time budget): a decision is the store's answer, as it is.
	direct  bool
	timeout time.Duration // the time budget of a store call; 0 for an in-process store
	blocks  bool          // the store keeps penalty boxes (backend.Info.Blocks)
	// retention is how long a key's state is kept after a write, at
	// least (a rule keeps it for its window if that is longer): the
	// longest window any of the Limiter's policies may have.
	retention  time.Duration
	policyFunc PolicyFunc
	// rules are the PolicyFunc's policies, compiled once each.
	rules *lru.Cache[Policy, *compiled]
}

// compiled is a policy and its rule for the store: the policy's constants in
// the algorithms' units, derived once, not on every call.
type compiled struct {
	policy Policy
	rule   *backend.Rule
}

// policyFuncRules bounds the PolicyFunc's policies kept compiled: a few tiers
// in practice; more are compiled again when they come back.
const policyFuncRules = 1024

// New returns a Limiter applying p on store: a backend (backend/memory,
// backend/redis, backend/valkey...), or a layer over one (guard, nearcache).
func New(store backend.Store, p Policy, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidArgument)
	}
	l := &Limiter{store: store, prefix: DefaultPrefix, timeout: DefaultTimeout}
	for _, o := range opts {
		o(l)
	}
	if len(l.prefix) > MaxPrefixLen {
		return nil, fmt.Errorf("%w: prefix of %d bytes, more than %d", ErrInvalidKey, len(l.prefix), MaxPrefixLen)
	}
	if l.timeout <= 0 {
		return nil, fmt.Errorf("%w: timeout %v is not positive", ErrInvalidArgument, l.timeout)
	}
	info := store.Info()
	if info.InProcess {
		l.timeout = 0
	}
	l.blocks = info.Blocks
	if l.retention < 0 || l.retention > MaxWindow {
		return nil, fmt.Errorf("%w: retention %v is not in (0, MaxWindow]", ErrInvalidArgument, l.retention)
	}
	c, err := l.compile(p) // the one validation of p
	if err != nil {
		return nil, err
	}
	if l.retention == 0 {
		l.retention = c.policy.Window
	}
	l.policy.Store(c)
	if l.policyFunc != nil {
		l.rules, _ = lru.New[Policy, *compiled](policyFuncRules) // only a size under 1 fails
	}
	l.direct = l.observer == nil && !l.failOpen && !l.dryRun && l.timeout == 0
	return l, nil
}

// SetPolicy replaces the policy. It applies to every key on its next call,
// with the history recorded so far: lowering a limit denies a key already
// over the new limit at once; nothing is reset. A new window length
// re-reads a sliding log under the new length (it holds what the last
// window kept); a fixed window whose aligned start changes starts a fresh
// count; a GCRA bucket keeps the requests' worth it holds (at most a burst).
// Any valid policy is accepted. A longer window than any before sees the
// history the store still keeps: state is kept for the retention of the
// policy it was written under (WithRetention's, or that policy's window if
// longer), so
// after New(store, PerSecond(10)), SetPolicy(PerMinute(10)) counts the
// requests of about the last second (and the slack a server adds to its
// TTLs), not of the last minute, until a minute of its own has passed; build
// the Limiter WithRetention(time.Minute) to keep the minute from the start.
// Changing the algorithm switches to state kept apart (the old state expires
// by itself). An invalid p changes nothing.
func (l *Limiter) SetPolicy(p Policy) error {
	c, err := l.compile(p)
	if err != nil {
		return err
	}
	l.policy.Store(c)
	return nil
}

// compile validates p for this Limiter and compiles it, its window to the
// microsecond (backend.NewRule validates it, once).
func (l *Limiter) compile(p Policy) (*compiled, error) {
	window := p.Window.Truncate(time.Microsecond)
	rule, err := backend.NewRule(p.Algorithm, int64(p.Limit), p.Window, int64(p.Burst), max(l.retention, window), l.prefix)
	if err == nil && p.Block != 0 {
		rule, err = rule.WithBlock(p.Block)
		if err == nil && !l.blocks {
			err = fmt.Errorf("%w: a penalty box on a store that keeps none: %w", ErrInvalidPolicy, errors.ErrUnsupported)
		}
	}
	if err != nil {
		return nil, err
	}
	p.Window = window
	return &compiled{policy: p, rule: rule}, nil
}

// policyOf is the compiled policy of key: the PolicyFunc's, or the Limiter's.
func (l *Limiter) policyOf(ctx context.Context, key string) (*compiled, error) {
	if l.policyFunc == nil {
		return l.policy.Load(), nil
	}
	p, err := l.policyFunc(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("%w: the policy of %q: %w", ErrInvalidPolicy, key, err)
	}
	if p == (Policy{}) {
		return l.policy.Load(), nil
	}
	if c, ok := l.rules.Get(p); ok {
		return c, nil
	}
	c, err := l.compile(p)
	if err != nil {
		return nil, fmt.Errorf("the policy of %q: %w", key, err)
	}
	l.rules.Add(p, c)
	return c, nil
}

// Policy returns the Limiter's policy: the one in force for every key, or,
// WithPolicyFunc, for the keys it leaves to the Limiter.
func (l *Limiter) Policy() Policy { return l.policy.Load().policy }

// Name is the name given with WithName.
func (l *Limiter) Name() string { return l.name }

// Allow is AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (d Decision, err error) {
	err = l.allowTo(ctx, key, 1, &d)
	return d, err
}

// AllowN decides whether key may make n requests now, and records them if
// so. n must be in [1, Policy.MaxCost()] (a larger n could never be
// admitted): anything else is ErrInvalidCost with nothing recorded. A denial
// records nothing. When the store fails, the failure mode answers
// (WithFailOpen), or the error is returned, wrapping ErrStore.
func (l *Limiter) AllowN(ctx context.Context, key string, n int) (d Decision, err error) {
	err = l.allowTo(ctx, key, n, &d)
	return d, err
}

// allowTo is AllowN writing the Decision into *d. Allow and AllowN are
// small enough to be inlined, so *d is the caller's own variable: a
// Decision is too large for registers, and returning it from a call that
// is not inlined copies it twice more in the caller's frame. Every call
// takes this one path; what it skips when nothing is to be settled (direct)
// is the settling alone.
func (l *Limiter) allowTo(ctx context.Context, key string, n int, d *Decision) error {
	if err := checkArgs(ctx, key); err != nil {
		return err
	}
	if l.direct && l.policyFunc == nil && l.clock == nil {
		// request(), written out: the common Limiter's whole path in one
		// frame (the call and its results cost a tenth of a decision).
		rule := l.policy.Load().rule
		if n < 1 || int64(n) > rule.MaxCost() {
			return costError(n, rule.MaxCost())
		}
		out, err := l.store.Take(ctx, backend.Request{Rule: rule, Key: key, Cost: int64(n)})
		switch {
		case err == nil:
			decisionTo(d, out, rule.MaxCost())
		case !fellBack(d, out, err):
			return storeError(err)
		}
		return nil
	}
	var req backend.Request
	c, err := l.request(ctx, key, n, &req)
	if err != nil {
		return err
	}
	if l.direct {
		out, err := l.store.Take(ctx, req)
		switch {
		case err == nil:
			decisionTo(d, out, c.rule.MaxCost())
		case !fellBack(d, out, err):
			return storeError(err)
		}
		return nil
	}
	*d, err = l.take(ctx, c, req)
	return err
}

// Peek reports key's quota without consuming any: Allowed tells whether a
// request of cost 1 would be admitted now, Remaining how many would. It
// records nothing. Failures are handled as for AllowN.
func (l *Limiter) Peek(ctx context.Context, key string) (Decision, error) {
	if err := checkArgs(ctx, key); err != nil {
		return Decision{}, err
	}
	var req backend.Request
	c, err := l.request(ctx, key, 1, &req)
	if err != nil {
		return Decision{}, err
	}
	return l.peek(ctx, c, req, true)
}

// Refund gives back n of the quota key has in use, for a request that was
// admitted and then not served (the upstream failed, a cache answered), and
// returns what Peek would say afterwards; Undo gives back what one named
// admission took, and is the one to use on a sliding log, where Refund
// drops the newest units whichever admission they were. Under each
// algorithm Refund undoes what an admission did, as far as time has not
// already:
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
// returned, wrapping ErrStore, whatever the failure mode. A store that
// cannot refund (every store in this module can) answers an error wrapping
// errors.ErrUnsupported.
func (l *Limiter) Refund(ctx context.Context, key string, n int) (Decision, error) {
	if err := checkArgs(ctx, key); err != nil {
		return Decision{}, err
	}
	var req backend.Request
	c, err := l.request(ctx, key, n, &req)
	if err != nil {
		return Decision{}, err
	}
	return l.refund(ctx, c, req)
}

// Reset forgets key's history under every algorithm: its full quota is
// available at once. A store failure is returned, wrapping ErrStore,
// whatever the failure mode; the time budget applies.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := checkArgs(ctx, key); err != nil {
		return err
	}
	sctx, budget := l.budget(ctx, time.Now())
	defer budget.end()
	if err := l.store.Reset(sctx, l.prefix, key); err != nil {
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

// checkArgs validates the arguments common to every call.
func checkArgs(ctx context.Context, key string) error {
	if ctx != nil && key != "" && len(key) <= MaxKeyLen {
		return nil // the common call, checked inline
	}
	return badArgs(ctx, key)
}

// badArgs is checkArgs' error.
func badArgs(ctx context.Context, key string) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	return backend.ValidateKey(key)
}
