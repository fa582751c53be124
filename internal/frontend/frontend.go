// Package frontend is what httplimit and grpclimit share around the
// handler they guard: the usage it reports, settled once it returns, and
// the permits it holds while it runs.
package frontend

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/ratelimit-go/ratelimit"
)

// usageKey is the context key of the work's usage recorder.
type usageKey struct{}

// WithUsage is ctx carrying a recorder of what the work uses, and the
// recorder: Report adds to it.
func WithUsage(ctx context.Context) (context.Context, *atomic.Int64) {
	used := new(atomic.Int64)
	return context.WithValue(ctx, usageKey{}, used), used
}

// Report adds n (when positive) to the recorder ctx carries, if any.
func Report(ctx context.Context, n int) {
	if u, ok := ctx.Value(usageKey{}).(*atomic.Int64); ok && n > 0 {
		u.Add(int64(n))
	}
}

// Settle charges each usage limiter (usage(i) says which of n rules are,
// and gives its Limiter) what was used beyond what it reserved before the
// work (costs[i], the admission d.Decisions[i] of keys[i]), or gives back
// what was not used: nothing when both are 0. The rules charged one
// excess (those that reserved alike: a check of 0, the commonest) are
// charged together, in one call of a store that charges several requests
// at once (ratelimit.Multi's ChargeN): tokens a minute and a day, one
// round trip after the response where there was one each. What else there
// is to settle (an estimate's unused part given back, rule by rule) is in
// flight at once with it: none waits on another. It outlives a caller
// gone (the usage was spent); its errors reach the Limiters' observers.
func Settle(ctx context.Context, n int, usage func(i int) (*ratelimit.Limiter, bool), keys []string, costs []int, d ratelimit.MultiDecision, used int) {
	ctx = context.WithoutCancel(ctx)
	due := 0
	for i := range n {
		if _, ok := usage(i); ok && used != costs[i] {
			due++
		}
	}
	if due > 1 {
		settleTogether(ctx, n, usage, keys, costs, d, used)
		return
	}
	for i := range n { // one rule (the common case): settled here, nothing gathered
		if l, ok := usage(i); ok && used != costs[i] {
			_, _ = l.Settle(ctx, keys[i], d.Decisions[i], costs[i], used)
		}
	}
}

// settleTogether is Settle of several rules: its own frame holds what the
// jobs capture, which would otherwise go to the heap on every call, one
// rule to settle or not.
func settleTogether(ctx context.Context, n int, usage func(i int) (*ratelimit.Limiter, bool), keys []string, costs []int, d ratelimit.MultiDecision, used int) {
	var charged []*ratelimit.Limiter
	var chargedKeys []string
	var jobs []func()
	excess := 0
	for i := range n {
		l, ok := usage(i)
		switch {
		case !ok || used == costs[i]:
		case used > costs[i] && (charged == nil || used-costs[i] == excess):
			charged, chargedKeys, excess = append(charged, l), append(chargedKeys, keys[i]), used-costs[i]
		default:
			jobs = append(jobs, func() { _, _ = l.Settle(ctx, keys[i], d.Decisions[i], costs[i], used) })
		}
	}
	switch len(charged) {
	case 0:
	case 1:
		jobs = append(jobs, func() { _, _ = charged[0].Charge(ctx, chargedKeys[0], excess) })
	default:
		if m, err := ratelimit.NewMulti(charged...); err == nil {
			jobs = append(jobs, func() { _, _ = m.ChargeN(ctx, chargedKeys, excess) })
		}
	}
	inFlight(jobs)
}

// inFlight runs jobs at once, the first in this goroutine, and returns
// when all have. A panic of a job (a store that breaks its contract: ours
// return errors) is raised again here, in the caller's goroutine, where it
// would have been raised had the jobs run one after another: never in a
// goroutine of ours, where it would end the process.
func inFlight(jobs []func()) {
	if len(jobs) == 0 {
		return
	}
	var wg sync.WaitGroup
	var panicked atomic.Pointer[any]
	for _, job := range jobs[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					panicked.CompareAndSwap(nil, &r)
				}
			}()
			job()
		}()
	}
	defer func() {
		wg.Wait()
		if r := panicked.Load(); r != nil {
			panic(*r)
		}
	}()
	jobs[0]()
}

// Acquire takes a permit of each of n InFlight rules (rule(i) gives its
// Limiter and the work's key, or the error the key could not be had
// with): the permits held; or, having given back every one taken, the
// index of the first rule that denied with its Decision, or the first
// error (with denied -1).
func Acquire(ctx context.Context, n int, rule func(i int) (*ratelimit.Limiter, string, error)) (held []*ratelimit.Permit, denied int, d ratelimit.Decision, err error) {
	held = make([]*ratelimit.Permit, 0, n)
	for i := range n {
		l, key, err := rule(i)
		var p *ratelimit.Permit
		if err == nil {
			p, d, err = l.Acquire(ctx, key)
		}
		switch {
		case err != nil:
			Release(ctx, held)
			return nil, -1, ratelimit.Decision{}, err
		case p == nil:
			Release(ctx, held)
			return nil, i, d, nil
		}
		held = append(held, p)
	}
	return held, -1, ratelimit.Decision{}, nil
}

// Release gives permits back, the caller gone or not; a failure ends a
// lease by itself.
func Release(ctx context.Context, permits []*ratelimit.Permit) {
	ctx = context.WithoutCancel(ctx)
	for _, p := range permits {
		_ = p.Release(ctx)
	}
}
