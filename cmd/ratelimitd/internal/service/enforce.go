package service

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// enforce decides the enforced checks into their statuses: together when
// they can be (see together), one by one when their costs differ, none
// when one admits nothing whatever the others hold (then they are peeked).
// undo gives back what an admission took: nil when nothing was taken, or
// when the caller will give nothing back (undoable false). What undo holds
// is copied for it alone, so that a request with nothing to give back
// allocates none of it (enforced may be the caller's stack).
func enforce(ctx context.Context, enforced []check, res *Result, undoable bool) (undo func(context.Context) error, err error) {
	switch {
	case len(enforced) == 0:
		return nil, nil
	case len(enforced) == 1:
		c := enforced[0]
		d, err := takeOne(ctx, c)
		if err != nil {
			return nil, err
		}
		setDecision(res, c, d)
		if !d.Allowed || !undoable {
			return nil, nil
		}
		return func(ctx context.Context) error {
			_, err := c.limiter.Undo(ctx, c.key, c.cost, d)
			return err
		}, nil
	case impossible(enforced) >= 0:
		return nil, peekAll(ctx, enforced, impossible(enforced), res)
	case !together(enforced):
		var taken []ratelimit.Decision
		for _, c := range enforced {
			d, err := takeOne(ctx, c)
			if err != nil {
				return nil, err
			}
			setDecision(res, c, d)
			taken = append(taken, d)
		}
		if !undoable {
			return nil, nil
		}
		checks := slices.Clone(enforced)
		return func(ctx context.Context) error {
			var errs []error
			for i, c := range checks {
				if taken[i].Allowed {
					_, err := c.limiter.Undo(ctx, c.key, c.cost, taken[i])
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		}, nil
	}
	limiters := make([]*ratelimit.Limiter, len(enforced))
	var stack [stackChecks]string // the Multi keeps no key: they stay on the stack
	keys := stack[:]
	if len(enforced) > len(stack) {
		keys = make([]string, len(enforced))
	}
	keys = keys[:len(enforced)]
	for i, c := range enforced {
		limiters[i], keys[i] = c.limiter, c.key
	}
	m, err := ratelimit.NewMulti(limiters...)
	if err != nil {
		return nil, err
	}
	cost := enforced[0].cost
	md, err := m.AllowN(ctx, keys, cost)
	if err != nil {
		return nil, err
	}
	var unasked []check
	for i, c := range enforced {
		if !md.Allowed && md.Decisions[i].At.IsZero() {
			unasked = append(unasked, c) // another denied first (a near cache answered it alone)
			continue
		}
		setDecision(res, c, md.Decisions[i])
	}
	if !md.Allowed {
		return nil, peekEach(ctx, unasked, res)
	}
	if !undoable {
		return nil, nil
	}
	return undoer(m, slices.Clone(keys), cost, md), nil
}

// undoer gives back m's admission md of keys at cost. Its own frame holds
// what the closure captures: in enforce's, md (too large to be captured by
// value) would go to the heap on every call, undone or not.
func undoer(m *ratelimit.Multi, keys []string, cost int, md ratelimit.MultiDecision) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := m.Undo(ctx, keys, cost, md)
		return err
	}
}

// peekEach fills the statuses of checks, which a denial kept from being
// asked, with what each holds (a Peek, which records nothing): every
// descriptor's status is its own, whatever answered the others. They are
// peeked together (Multi.Peek: on a server one round trip, the store's
// PeekAll), and over when the check's cost does not fit.
func peekEach(ctx context.Context, checks []check, res *Result) error {
	ds, err := peeks(ctx, checks)
	if err != nil {
		return err
	}
	for i, c := range checks {
		record(res, c, ds[i], ds[i].Remaining < c.cost, false, false)
	}
	return nil
}

// peeks are what each of checks (each with a limiter) holds, peeked
// together.
func peeks(ctx context.Context, checks []check) ([]ratelimit.Decision, error) {
	if len(checks) == 0 {
		return nil, nil
	}
	m, keys, err := multiOf(checks)
	if err != nil {
		return nil, err
	}
	md, err := m.Peek(ctx, keys...)
	return md.Decisions, err
}

// multiOf is a Multi of the limiters of checks (each with one), and their
// keys.
func multiOf(checks []check) (*ratelimit.Multi, []string, error) {
	limiters := make([]*ratelimit.Limiter, len(checks))
	keys := make([]string, len(checks))
	for i, c := range checks {
		limiters[i], keys[i] = c.limiter, c.key
	}
	m, err := ratelimit.NewMulti(limiters...)
	return m, keys, err
}

func setDecision(res *Result, c check, d ratelimit.Decision) {
	record(res, c, d, !d.Allowed, false, d.Allowed)
}

// takeOne decides one check, answering a request no quota can admit (a
// rule of 0 requests, a cost over the limit) without the store.
func takeOne(ctx context.Context, c check) (ratelimit.Decision, error) {
	if c.limiter == nil || c.cost > c.rule.Policy.MaxCost() {
		return denied(ctx, c)
	}
	return c.limiter.AllowN(ctx, c.key, c.cost)
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
// hold: it records nothing, and the others say what they hold (peeked
// together, as peekEach).
func peekAll(ctx context.Context, checks []check, deny int, res *Result) error {
	d, err := denied(ctx, checks[deny])
	if err != nil {
		return err
	}
	record(res, checks[deny], d, true, false, false)
	var others []check
	for i, c := range checks {
		if i == deny {
			continue
		}
		if c.limiter == nil { // a rule of 0 requests: nothing to peek
			record(res, c, ratelimit.Decision{}, false, false, false)
			continue
		}
		others = append(others, c)
	}
	ds, err := peeks(ctx, others)
	if err != nil {
		return err
	}
	for i, c := range others {
		record(res, c, ds[i], false, false, false)
	}
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
// no two on the same key of the same rule. A request holds a few
// descriptors, whose pairs cost less to compare than the map that did it
// before (a twelfth of a Decide of three); more checks than pairwise go
// through a map, so that the cost stays linear whatever the limits.
func together(checks []check) bool {
	for _, c := range checks {
		if c.cost != checks[0].cost {
			return false
		}
	}
	if len(checks) > pairwise {
		type at struct {
			limiter *ratelimit.Limiter
			key     string
		}
		seen := make(map[at]struct{}, len(checks))
		for _, c := range checks {
			if _, dup := seen[at{c.limiter, c.key}]; dup {
				return false
			}
			seen[at{c.limiter, c.key}] = struct{}{}
		}
		return true
	}
	for i, c := range checks {
		for _, o := range checks[:i] {
			if o.limiter == c.limiter && o.key == c.key {
				return false
			}
		}
	}
	return true
}

// pairwise is the most checks together compares pair by pair.
const pairwise = 16
