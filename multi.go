package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
)

// Multi applies several Limiters to one request, each to its own key (per
// user, per IP address, per token...): the request is admitted only if every
// one of them admits it, and the answer is the strictest of their decisions.
//
// A denial consumes no quota from the other policies. When every Limiter
// shares one store that can decide several requests atomically
// (backend.Store's TakeAll: the memory store always; Redis and Valkey on a
// single server whatever the keys, and on a cluster when every key lives
// in one hash slot, as several policies on the same key do), the whole
// decision is one atomic step and this holds exactly. On a cluster, keys of several hash
// tags are decided by a script per tag, sent at once, in two steps (every
// shard peeks, then every shard takes if all would admit): a race between
// the steps counts a denied request against the other policies, as below.
// Otherwise Multi first peeks at every policy; when one would deny, it asks
// that policy alone (a denial records nothing) and stops. Only when all
// would admit does it take from each in turn: if another request takes the
// last quota of a later policy between the peek and the take, the earlier
// policies have already counted this request (at most its cost, once per
// such race). That is the one guarantee the one-by-one path does not make;
// each policy on its own never over-admits.
type Multi struct {
	limiters []*Limiter
	// atomic is the store every Limiter shares, when no Limiter is in
	// dry-run mode (whose admissions must not hold back the others'
	// records): its TakeAll is tried first.
	atomic backend.Store
	// shared is the store every Limiter shares, dry run or not: its
	// PeekAll and ChargeAll are tried first (no all-or-nothing there for a
	// dry run to hold back; each answer is settled by its own Limiter).
	shared backend.Store
}

// MultiDecision is the strictest of the policies' decisions.
type MultiDecision struct {
	// Decision is the deciding policy's: when denied, the denial with the
	// longest RetryAfter; when allowed, a failure mode's admission if any
	// (its quota is unknown), else the decision with the fewest requests
	// remaining.
	Decision
	// Name is the deciding Limiter's name (WithName), e.g. "per-ip".
	Name string
	// Decisions are every Limiter's, in order: for a denied request, what
	// each policy holds (its peek) where the store told Multi; zero for the
	// policies a denial kept Multi from asking (after the denying one, on
	// a store that decides them one by one; or all but the denying one
	// when a layer answered a known denial, as package nearcache does).
	Decisions []Decision
	// Policies are the policy each Limiter applied to its key, in order
	// (its own, or its PolicyFunc's for the key).
	Policies []Policy
}

// NewMulti returns a Multi over limiters, asked in this order (put the
// likeliest to deny first).
func NewMulti(limiters ...*Limiter) (*Multi, error) {
	if len(limiters) == 0 {
		return nil, fmt.Errorf("%w: no limiters", ErrInvalidArgument)
	}
	for i, l := range limiters {
		if l == nil {
			return nil, fmt.Errorf("%w: limiter %d is nil", ErrInvalidArgument, i)
		}
	}
	m := &Multi{limiters: limiters}
	if s := limiters[0].store; reflect.TypeOf(s).Comparable() {
		m.shared, m.atomic = s, s
		for _, l := range limiters {
			if l.store != s {
				m.shared, m.atomic = nil, nil
				break
			}
			if l.dryRun {
				m.atomic = nil
			}
		}
	}
	return m, nil
}

// Allow is AllowN(ctx, keys, 1).
func (m *Multi) Allow(ctx context.Context, keys ...string) (MultiDecision, error) {
	return m.AllowN(ctx, keys, 1)
}

// AllowN decides n requests with keys[i] for the i-th Limiter, and records
// them under every policy if all admit them. Bad input (a wrong number of
// keys, an invalid key, n outside any policy's [1, Limit]) is an error that
// records nothing. A store failure is handled by each Limiter's failure
// mode: the decision is a failure mode's when every failed Limiter has one,
// else the error is returned.
func (m *Multi) AllowN(ctx context.Context, keys []string, n int) (MultiDecision, error) {
	return m.allow(ctx, keys, n, nil)
}

// AllowCosts is AllowN with a cost per policy: keys[i] takes costs[i] from
// the i-th Limiter. A cost of 0 checks that policy without taking from it
// (its Peek, before any policy is taken from): the request is denied once
// that quota is spent, for a budget charged after the work (ChargeN,
// Settle). The policies with a cost are decided as AllowN's.
func (m *Multi) AllowCosts(ctx context.Context, keys []string, costs []int) (MultiDecision, error) {
	if len(costs) != len(m.limiters) {
		return MultiDecision{}, fmt.Errorf("%w: %d costs for %d limiters", ErrInvalidArgument, len(costs), len(m.limiters))
	}
	return m.allow(ctx, keys, 0, costs)
}

// allow is AllowN of n under every policy, or with costs, AllowCosts.
func (m *Multi) allow(ctx context.Context, keys []string, n int, costs []int) (MultiDecision, error) {
	if len(keys) != len(m.limiters) {
		return MultiDecision{}, fmt.Errorf("%w: %d keys for %d limiters", ErrInvalidArgument, len(keys), len(m.limiters))
	}
	cs := make([]*compiled, len(m.limiters))
	reqs := make([]backend.Request, len(m.limiters))
	take := make([]int, 0, len(m.limiters)) // the policies taken from; the others are checked
	for i, l := range m.limiters {
		if err := checkArgs(ctx, keys[i]); err != nil {
			return MultiDecision{}, err
		}
		cost := n
		if costs != nil {
			cost = max(costs[i], 1) // a check peeks at a cost of 1
			if costs[i] < 0 {
				return MultiDecision{}, fmt.Errorf("%w: a cost of %d (%s)", ErrInvalidCost, costs[i], l.name)
			}
		}
		var err error
		if cs[i], err = l.request(ctx, keys[i], cost, &reqs[i]); err != nil {
			return MultiDecision{}, fmt.Errorf("%w (%s)", err, l.name)
		}
		if costs == nil || costs[i] > 0 {
			take = append(take, i)
		}
	}
	out := MultiDecision{Decisions: make([]Decision, len(m.limiters)), Policies: make([]Policy, len(m.limiters))}
	for i := range cs {
		out.Policies[i] = cs[i].policy
	}
	if len(take) < len(m.limiters) { // the checks first: a spent quota takes nothing from the others
		for i, l := range m.limiters {
			if costs[i] != 0 {
				continue
			}
			d, err := l.peek(ctx, cs[i], reqs[i], true)
			if err != nil {
				return MultiDecision{}, err
			}
			if out.Decisions[i] = d; !d.Allowed {
				out.decide(m.limiters)
				return out, nil
			}
		}
		if len(take) == 0 {
			out.decide(m.limiters)
			return out, nil
		}
	}
	if m.atomic != nil {
		done, err := m.takeAll(ctx, cs, reqs, take, &out)
		if done || err != nil {
			return out, err
		}
	}
	if len(take) > 1 {
		// The peeks are looks, not decisions: not observed. A denial
		// reports the quota the policies looked at before it hold.
		for _, i := range take {
			l := m.limiters[i]
			d, err := l.peek(ctx, cs[i], reqs[i], false)
			if err != nil {
				return MultiDecision{}, err
			}
			out.Decisions[i] = d // what it holds, should another deny
			if !d.Allowed {
				// Would deny: ask this policy alone, which records nothing
				// on a denial and is the decision of record.
				d, err = l.take(ctx, cs[i], reqs[i])
				if err != nil {
					return MultiDecision{}, err
				}
				out.Decisions[i] = d
				if !d.Allowed {
					out.decide(m.limiters)
					return out, nil
				}
				// Quota came free since the peek: taken here, now the rest.
				return m.takeRest(ctx, cs, reqs, take, out, i)
			}
		}
	}
	return m.takeRest(ctx, cs, reqs, take, out, -1)
}

// RefundN gives back n to every Limiter, for a request that AllowN admitted
// with keys and that was not served: each policy took n, and each gets n
// back (see Limiter.Refund). Refund nothing after a denial, which took
// nothing. It refunds every policy it can and returns their errors joined.
func (m *Multi) RefundN(ctx context.Context, keys []string, n int) error {
	if len(keys) != len(m.limiters) {
		return fmt.Errorf("%w: %d keys for %d limiters", ErrInvalidArgument, len(keys), len(m.limiters))
	}
	var errs []error
	for i, l := range m.limiters {
		if _, err := l.Refund(ctx, keys[i], n); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", l.name, err))
		}
	}
	return errors.Join(errs...)
}

// takeAll decides the requests of the policies take in one atomic step of
// the shared store. It reports false, with no error, when the store cannot
// decide them together.
func (m *Multi) takeAll(ctx context.Context, cs []*compiled, all []backend.Request, take []int, out *MultiDecision) (bool, error) {
	reqs := all
	if len(take) < len(all) {
		reqs = make([]backend.Request, len(take))
		for j, i := range take {
			reqs[j] = all[i]
		}
	}
	began := time.Now()
	sctx, budget := m.limiters[0].budget(ctx, began)
	outs := make([]backend.Outcome, len(reqs))
	err := m.atomic.TakeAll(sctx, reqs, outs)
	budget.end()
	if errors.Is(err, errors.ErrUnsupported) {
		return false, nil
	}
	for j, i := range take {
		l := m.limiters[i]
		if err == nil && outs[j].At == 0 {
			continue // not decided: a layer knew another policy's denial (see backend.Store's TakeAll)
		}
		d, lerr := l.settle(ctx, cs[i], reqs[j], OpTake, true, &outs[j], shareOf(err, len(reqs), j), began)
		if lerr != nil {
			*out = MultiDecision{}
			return true, lerr
		}
		out.Decisions[i] = d
	}
	out.decide(m.limiters)
	return true, nil
}

// takeRest takes from every policy of take but the one already taken from.
func (m *Multi) takeRest(ctx context.Context, cs []*compiled, reqs []backend.Request, take []int, out MultiDecision, taken int) (MultiDecision, error) {
	for _, i := range take {
		l := m.limiters[i]
		if i == taken {
			continue
		}
		d, err := l.take(ctx, cs[i], reqs[i])
		if err != nil {
			return MultiDecision{}, err
		}
		out.Decisions[i] = d
		if !d.Allowed { // lost a race since the peek
			break
		}
	}
	out.decide(m.limiters)
	return out, nil
}

// decide picks the strictest of the decisions made (a policy not asked has
// the zero Decision).
func (out *MultiDecision) decide(limiters []*Limiter) {
	best := -1
	for i, d := range out.Decisions {
		if d.Limit > 0 && (best < 0 || stricter(d, out.Decisions[best])) {
			best = i
		}
	}
	if best >= 0 {
		out.Decision, out.Name = out.Decisions[best], limiters[best].name
	}
}

// stricter: a denial over an admission, the longer wait among denials; among
// admissions a failure mode's (whose quota is unknown), then the fewer
// remaining.
func stricter(a, b Decision) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if !a.Allowed {
		return a.RetryAfter > b.RetryAfter
	}
	if (a.Source != SourceStore) != (b.Source != SourceStore) {
		return a.Source != SourceStore
	}
	return a.Remaining < b.Remaining
}
