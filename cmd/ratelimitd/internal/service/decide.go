package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// decide asks the store for every check and fills res.
//
// Enforced limits are decided together: a request is admitted only if every
// one admits it, and a denial consumes no quota from the others
// (ratelimit.Multi; one atomic step when the store can). This is where
// ratelimitd differs from envoyproxy/ratelimit, which counts a denied
// request against every other descriptor too (its issue 1060). The one
// exception keeps Envoy's semantics: descriptors with different costs (a
// per-descriptor hits_addend) are decided one by one.
//
// A descriptor's own hits_addend reports usage, counted as upstream counts
// every hit: charged whatever the quota left (ratelimit.Limiter.Charge),
// over the limit once the count passes it; a hits_addend of 0 checks the
// limit without counting (over once the count has passed it). So a token
// budget checked before a request and charged after it (Envoy's AI
// Gateway) is over from the first report that overshoots.
//
// Shadow limits are decided and recorded on their own, and answer OK.
func (s *Service) decide(ctx context.Context, checks []check, res *Result) error {
	var enforced []check
	for _, c := range checks {
		if c.usage {
			d, over, err := useOne(ctx, c)
			if err != nil {
				return err
			}
			st := &res.Statuses[c.index]
			st.Decision, st.OverLimit, st.Shadowed = d, over && !c.rule.Shadow, over && c.rule.Shadow
			res.OverLimit = res.OverLimit || st.OverLimit
			continue
		}
		if !c.rule.Shadow {
			enforced = append(enforced, c)
			continue
		}
		d, err := takeOne(ctx, c)
		if err != nil {
			return err
		}
		st := &res.Statuses[c.index]
		st.Decision, st.Shadowed = d, !d.Allowed
	}
	switch {
	case len(enforced) == 0:
		return nil
	case len(enforced) == 1:
		d, err := takeOne(ctx, enforced[0])
		if err != nil {
			return err
		}
		setDecision(res, enforced[0], d)
	case impossible(enforced) >= 0:
		return peekAll(ctx, enforced, impossible(enforced), res)
	case !together(enforced):
		for _, c := range enforced {
			d, err := takeOne(ctx, c)
			if err != nil {
				return err
			}
			setDecision(res, c, d)
		}
	default:
		limiters := make([]*ratelimit.Limiter, len(enforced))
		keys := make([]string, len(enforced))
		for i, c := range enforced {
			limiters[i], keys[i] = c.limiter, c.key
		}
		m, err := ratelimit.NewMulti(limiters...)
		if err != nil {
			return err
		}
		md, err := m.AllowN(ctx, keys, enforced[0].cost)
		if err != nil {
			return err
		}
		var unasked []check
		for i, c := range enforced {
			setDecision(res, c, md.Decisions[i])
			if !md.Allowed && !res.Statuses[c.index].Asked() {
				unasked = append(unasked, c) // another denied first (a near cache answered it alone)
			}
		}
		res.OverLimit = !md.Allowed
		return peekEach(ctx, unasked, res)
	}
	return nil
}

// peekEach fills the statuses of checks, which a denial kept from being
// asked, with what each holds (a Peek, which records nothing): every
// descriptor's status is its own, whatever answered the others. The peeks
// run at once, each its own round trip.
func peekEach(ctx context.Context, checks []check, res *Result) error {
	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := c.limiter.Peek(ctx, c.key)
			st := &res.Statuses[c.index] // each goroutine its own status
			st.Decision, st.OverLimit, errs[i] = d, err == nil && d.Remaining < c.cost, err
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func setDecision(res *Result, c check, d ratelimit.Decision) {
	st := &res.Statuses[c.index]
	st.Decision, st.OverLimit = d, !d.Allowed
	if !d.Allowed {
		res.OverLimit = true
	}
}

// takeOne decides one check, answering a request no quota can admit (a
// rule of 0 requests, a cost over the limit) without the store.
func takeOne(ctx context.Context, c check) (ratelimit.Decision, error) {
	if c.limiter == nil || c.cost > c.rule.Policy.MaxCost() {
		return denied(ctx, c)
	}
	return c.limiter.AllowN(ctx, c.key, c.cost)
}

// useOne decides a descriptor's own usage: a charge of its cost, over when
// it did not fit; a check (cost 0), over when the count has passed the
// limit.
func useOne(ctx context.Context, c check) (ratelimit.Decision, bool, error) {
	switch {
	case c.limiter == nil: // a rule of 0 requests: any use is over
		d, err := denied(ctx, c)
		return d, true, err
	case c.cost == 0:
		d, err := c.limiter.Peek(ctx, c.key)
		return d, d.Count > d.Limit, err
	}
	d, err := c.limiter.Charge(ctx, c.key, c.cost)
	return d, !d.Allowed, err
}

// impossible is the index in checks of one that no quota admits, or -1.
func impossible(checks []check) int {
	for i, c := range checks {
		if c.limiter == nil || c.cost > c.rule.Policy.MaxCost() {
			return i
		}
	}
	return -1
}

// peekAll answers a request that checks[deny] denies whatever the others
// hold: it records nothing, and the others say what they hold (Peek).
func peekAll(ctx context.Context, checks []check, deny int, res *Result) error {
	for i, c := range checks {
		var d ratelimit.Decision
		var err error
		if i == deny {
			d, err = denied(ctx, c)
		} else if c.limiter != nil {
			d, err = c.limiter.Peek(ctx, c.key)
		}
		if err != nil {
			return err
		}
		res.Statuses[c.index].Decision = d
		res.Statuses[c.index].OverLimit = i == deny
	}
	res.OverLimit = true
	return nil
}

// denied is the decision for a request no quota admits: nothing remains,
// and the rule's window (aligned to the epoch, like a fixed window's) says
// when the count resets. A cost over a limit the store holds asks the
// store what it holds (Peek), so the answer stays true.
func denied(ctx context.Context, c check) (ratelimit.Decision, error) {
	if c.limiter != nil {
		d, err := c.limiter.Peek(ctx, c.key)
		d.Allowed, d.RetryAfter = false, 0
		return d, err
	}
	now := time.Now()
	w := c.rule.Window
	reset := now.Truncate(w).Add(w)
	return ratelimit.Decision{Limit: 0, At: now, ResetAt: reset}, nil
}

// together reports whether checks can be one Multi decision: one cost, and
// no two on the same key of the same rule. Linear in the checks.
func together(checks []check) bool {
	type at struct {
		limiter *ratelimit.Limiter
		key     string
	}
	seen := make(map[at]struct{}, len(checks))
	for _, c := range checks {
		if c.cost != checks[0].cost {
			return false
		}
		if _, dup := seen[at{c.limiter, c.key}]; dup {
			return false
		}
		seen[at{c.limiter, c.key}] = struct{}{}
	}
	return true
}
