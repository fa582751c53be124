package ratelimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/ratelimit-go/ratelimit/backend"
)

// ChargeN records n of usage under every policy (each Limiter's Charge with
// keys[i]), whatever their quota: the answer is the strictest of their
// charges, Allowed when the usage fit in every policy. Each charge is
// atomic on its own: when every Limiter shares a store that charges
// several requests in one call (backend.Store's ChargeAll: on a server,
// one round trip), they are made in one; otherwise one after another. A
// policy whose store fails is not charged, and its error is returned with
// the decisions of those that were.
func (m *Multi) ChargeN(ctx context.Context, keys []string, n int) (MultiDecision, error) {
	if n < 1 || int64(n) > MaxCharge {
		return MultiDecision{}, fmt.Errorf("%w: a charge of %d, want 1 to %d", ErrInvalidCost, n, int64(MaxCharge))
	}
	if m.shared != nil && len(keys) == len(m.limiters) && len(keys) > 1 {
		if md, ok, err := m.together(ctx, keys, n, OpCharge, backend.Store.ChargeAll); ok {
			return md, err
		}
	}
	return m.each(ctx, keys, func(l *Limiter, key string) (Decision, error) { return l.Charge(ctx, key, n) })
}

// Undo gives back n of what the admission md took from every policy (each
// Limiter's Undo of md.Decisions[i] with keys[i]), for work admitted and
// then not done, or done for less; it returns what each would Peek after.
func (m *Multi) Undo(ctx context.Context, keys []string, n int, md MultiDecision) (MultiDecision, error) {
	if len(md.Decisions) != len(m.limiters) {
		return MultiDecision{}, fmt.Errorf("%w: a decision of %d policies for %d limiters", ErrInvalidArgument, len(md.Decisions), len(m.limiters))
	}
	if n < 1 || int64(n) > MaxCharge {
		return MultiDecision{}, fmt.Errorf("%w: an undo of %d, want 1 to %d", ErrInvalidCost, n, int64(MaxCharge))
	}
	i := 0
	return m.each(ctx, keys, func(l *Limiter, key string) (Decision, error) {
		d, err := l.Undo(ctx, key, n, md.Decisions[i])
		i++
		return d, err
	})
}

// Settle ends a reservation made by AllowN(ctx, keys, reserved), admitted
// as md, for work that used used (a reserved of 0: a check that took
// nothing): every policy is charged the excess, or given back what was not
// used (see Limiter.Settle).
func (m *Multi) Settle(ctx context.Context, keys []string, md MultiDecision, reserved, used int) (MultiDecision, error) {
	switch {
	case used < 0 || reserved < 0:
		return MultiDecision{}, fmt.Errorf("%w: reserved %d and used %d: want neither negative", ErrInvalidCost, reserved, used)
	case used > reserved:
		return m.ChargeN(ctx, keys, used-reserved)
	case used < reserved:
		return m.Undo(ctx, keys, reserved-used, md)
	}
	return m.Peek(ctx, keys...)
}

// each asks every Limiter with its key, in order, and answers the
// strictest of their decisions. Bad input is refused before any is asked;
// a failed Limiter's error is returned, joined with the others', beside
// the decisions that were made.
func (m *Multi) each(ctx context.Context, keys []string, ask func(*Limiter, string) (Decision, error)) (MultiDecision, error) {
	if len(keys) != len(m.limiters) {
		return MultiDecision{}, fmt.Errorf("%w: %d keys for %d limiters", ErrInvalidArgument, len(keys), len(m.limiters))
	}
	for _, key := range keys {
		if err := checkArgs(ctx, key); err != nil {
			return MultiDecision{}, err
		}
	}
	out := MultiDecision{Decisions: make([]Decision, len(m.limiters)), Policies: make([]Policy, len(m.limiters))}
	var errs []error
	for i, l := range m.limiters {
		if c, err := l.policyOf(ctx, keys[i]); err == nil {
			out.Policies[i] = c.policy
		}
		d, err := ask(l, keys[i])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", l.name, err))
			continue
		}
		out.Decisions[i] = d
	}
	out.decide(m.limiters)
	return out, errors.Join(errs...)
}
