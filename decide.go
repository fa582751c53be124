package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
)

// request is key's compiled policy, and writes into req the request of cost
// n for the store (into the caller's variable: a Request returned beside
// the policy and an error is stored and reloaded, a fifth of a memory
// decision). A cost the policy can never admit, and a caller's clock
// outside [minTime, maxTime], are refused here, before any I/O.
func (l *Limiter) request(ctx context.Context, key string, n int, req *backend.Request) (*compiled, error) {
	if l.policyFunc == nil && l.clock == nil { // the common Limiter, inlined
		c := l.policy.Load()
		if n < 1 || int64(n) > c.rule.MaxCost() {
			return nil, costError(n, c.rule.MaxCost())
		}
		req.Rule, req.Key, req.Cost, req.Now = c.rule, key, int64(n), 0
		return c, nil
	}
	return l.requestOf(ctx, key, n, req)
}

// requestOf is request, through the PolicyFunc and the caller's clock.
func (l *Limiter) requestOf(ctx context.Context, key string, n int, req *backend.Request) (*compiled, error) {
	c, err := l.policyOf(ctx, key)
	if err != nil {
		return nil, err
	}
	if n < 1 || int64(n) > c.rule.MaxCost() {
		return nil, costError(n, c.rule.MaxCost())
	}
	req.Rule, req.Key, req.Cost, req.Now = c.rule, key, int64(n), 0
	if l.clock != nil {
		now := l.clock()
		if err := validateTime(now); err != nil {
			return nil, err
		}
		req.Now = now.UnixMicro()
	}
	return c, nil
}

// costError is the error of a cost n outside [1, maxCost].
func costError(n int, maxCost int64) error {
	return fmt.Errorf("%w: n=%d, want 1 to %d", ErrInvalidCost, n, maxCost)
}

// take asks the store to decide req, and settles its answer.
func (l *Limiter) take(ctx context.Context, c *compiled, req backend.Request) (Decision, error) {
	began := time.Now()
	sctx, budget := l.budget(ctx, began)
	out, err := l.store.Take(sctx, req)
	budget.end()
	return l.settle(ctx, c, req, OpTake, true, &out, err, began)
}

// peek asks the store what it would decide for req, and settles its answer;
// observe says whether the observer sees it (a user's Peek), or not (Multi's
// look before it decides: the decision it then makes is what is observed).
func (l *Limiter) peek(ctx context.Context, c *compiled, req backend.Request, observe bool) (Decision, error) {
	began := time.Now()
	sctx, budget := l.budget(ctx, began)
	out, err := l.store.Peek(sctx, req)
	budget.end()
	return l.settle(ctx, c, req, OpPeek, observe, &out, err, began)
}

// settle turns what the store said into what the caller gets: the failure
// mode answers for a failed store, dry-run admits, and the observer sees it
// all, if observe.
func (l *Limiter) settle(ctx context.Context, c *compiled, req backend.Request, k Op, observe bool, out *backend.Outcome, err error, began time.Time) (Decision, error) {
	var d Decision
	switch {
	case err == nil:
		d = decision(*out, c.rule.MaxCost())
	case fellBack(&d, *out, err):
		err = nil
	default:
		err = storeError(err)
		// Input the store refuses (a cost that can never fit a guard's
		// share while its primary is down) and an algorithm it does not
		// support (a mistake of configuration) are never admitted.
		if l.failOpen && !refused(err) {
			d = Decision{Allowed: true, Limit: int(c.rule.MaxCost()), At: began, Source: SourceFailOpen}
		}
	}
	if l.observer != nil && observe {
		l.observer.Observe(ctx, Event{Name: l.name, Policy: c.policy, Key: req.Key, Cost: int(req.Cost), Op: k, Decision: d, Err: err, Latency: time.Since(began), DryRun: l.dryRun})
	}
	switch {
	case err != nil && !d.Allowed:
		return Decision{}, err
	case l.dryRun && !d.Allowed:
		d.Allowed, d.RetryAfter = true, 0
	}
	return d, nil
}

// decision is the Decision of a store's outcome under a policy whose largest
// cost is maxCost: the one place the store's integers become the user's
// types.
func decision(out backend.Outcome, maxCost int64) (d Decision) {
	decisionTo(&d, out, maxCost)
	return d
}

// decisionTo is decision, written to d field by field: a Decision built
// whole and then copied is stored 8 bytes at a time and reloaded 16 at a
// time, and each such load stalls (docs/figures.md measures it).
func decisionTo(d *Decision, out backend.Outcome, maxCost int64) {
	d.Allowed = out.Allowed()
	d.Limit = int(maxCost)
	d.Remaining = int(max(maxCost-out.Count, 0))
	d.Count = int(out.Count)
	d.ResetAt = time.UnixMicro(out.ResetAt)
	d.RetryAfter = time.Duration(out.RetryAfter) * time.Microsecond
	d.At = time.UnixMicro(out.At)
	d.Source = SourceStore
}

// fellBack reports whether err says that out is a stand-in's decision (a
// *backend.Fallback, of one request), and if so writes it to d.
func fellBack(d *Decision, out backend.Outcome, err error) bool {
	var fb *backend.Fallback
	if !errors.As(err, &fb) || len(fb.Rules) != 1 {
		return false
	}
	decisionTo(d, out, fb.Rules[0].MaxCost())
	d.Source = SourceFallback
	return true
}
