package ratelimit

import (
	"context"
	"errors"
	"fmt"
)

// Multi applies several Limiters to one request, each to its own key (per
// user, per IP address, per token...): the request is admitted only if every
// one of them admits it, and the answer is the strictest of their decisions.
//
// A denial consumes no quota from the other policies, as far as the stores
// allow: Multi first peeks at every policy; when one would deny, it asks that
// policy alone (a denial records nothing) and stops. Only when all would
// admit does it take from each in turn. The keys of different policies live in
// different hash slots in general, so no single script can decide them
// together on Redis or Valkey: if another request takes the last quota of a
// later policy between the peek and the take, the earlier policies have
// already counted this request (at most its cost, once per such race). That
// is the one guarantee Multi does not make; each policy on its own never
// over-admits.
type Multi struct {
	limiters []*Limiter
}

// MultiDecision is the strictest of the policies' decisions.
type MultiDecision struct {
	// Decision is the deciding policy's: when denied, the denial with the
	// longest RetryAfter; when allowed, the decision with the fewest
	// requests remaining.
	Decision
	// Name is the deciding Limiter's name (WithName), e.g. "per-ip".
	Name string
	// Decisions are every Limiter's, in order; zero for the policies a
	// denial kept Multi from asking.
	Decisions []Decision
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
	return &Multi{limiters: limiters}, nil
}

// Allow is AllowN(ctx, 1, keys...).
func (m *Multi) Allow(ctx context.Context, keys ...string) (MultiDecision, error) {
	return m.AllowN(ctx, 1, keys...)
}

// AllowN decides n requests with keys[i] for the i-th Limiter, and records
// them under every policy if all admit them. Bad input (a wrong number of
// keys, an invalid key, n outside any policy's [1, Limit]) is an error that
// records nothing. A store error ends the decision (unless that Limiter
// fails open) and is returned.
func (m *Multi) AllowN(ctx context.Context, n int, keys ...string) (MultiDecision, error) {
	if len(keys) != len(m.limiters) {
		return MultiDecision{}, fmt.Errorf("%w: %d keys for %d limiters", ErrInvalidArgument, len(keys), len(m.limiters))
	}
	for i, l := range m.limiters {
		if err := checkArgs(ctx, keys[i]); err != nil {
			return MultiDecision{}, err
		}
		if limit := l.Policy().Limit; n < 1 || n > limit {
			return MultiDecision{}, fmt.Errorf("%w: n=%d, want 1 to %d (%s)", ErrInvalidCost, n, limit, l.name)
		}
	}
	out := MultiDecision{Decisions: make([]Decision, len(m.limiters))}
	var errs []error
	if len(m.limiters) > 1 {
		for i, l := range m.limiters {
			d, err := l.Peek(ctx, keys[i])
			if err != nil && !d.Allowed {
				return out, err
			}
			errs = appendErr(errs, err)
			if err == nil && d.Remaining < n {
				// Would deny: ask this policy alone, which records nothing
				// on a denial and gives the exact retry-after for n.
				d, err = l.AllowN(ctx, keys[i], n)
				out.Decisions[i] = d
				if err != nil && !d.Allowed {
					return out, err
				}
				errs = appendErr(errs, err)
				if !d.Allowed {
					out.decide(m.limiters)
					return out, errors.Join(errs...)
				}
				// Quota came free since the peek: taken here, now the rest.
				return m.takeRest(ctx, n, keys, out, i, errs)
			}
		}
	}
	return m.takeRest(ctx, n, keys, out, -1, errs)
}

// takeRest takes n from every Limiter but the one already taken from.
func (m *Multi) takeRest(ctx context.Context, n int, keys []string, out MultiDecision, taken int, errs []error) (MultiDecision, error) {
	for i, l := range m.limiters {
		if i == taken {
			continue
		}
		d, err := l.AllowN(ctx, keys[i], n)
		out.Decisions[i] = d
		if err != nil && !d.Allowed {
			return out, err
		}
		errs = appendErr(errs, err)
		if !d.Allowed { // lost a race since the peek
			break
		}
	}
	out.decide(m.limiters)
	return out, errors.Join(errs...)
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

// stricter: a denial over an admission, the longer wait among denials, the
// fewer remaining among admissions.
func stricter(a, b Decision) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if !a.Allowed {
		return a.RetryAfter > b.RetryAfter
	}
	return a.Remaining < b.Remaining
}

func appendErr(errs []error, err error) []error {
	if err != nil {
		return append(errs, err)
	}
	return errs
}
