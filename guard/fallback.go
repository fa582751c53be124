package guard

import (
	"context"
	"fmt"

	"github.com/ratelimit-go/ratelimit/backend"
)

// The fallback: what decides, under this instance's share of each policy,
// while the primary cannot.

// local answers req from the fallback, or fails with cause.
func (s *Store) local(ctx context.Context, req backend.Request, do call, cause error) (backend.Outcome, error) {
	if s.fallback == nil {
		return backend.Outcome{}, cause
	}
	if err := do.validate(&req); err != nil { // the primary did not see it: validated here, once
		return backend.Outcome{}, fmt.Errorf("ratelimit/guard: %w", err)
	}
	sh := s.shareOf(req.Rule)
	req, err := s.localRequest(req, do.charge)
	if err != nil {
		return backend.Outcome{}, fmt.Errorf("%w (the primary: %w)", err, cause)
	}
	// The caller's context may be spent on the primary's time budget; the
	// fallback decides in process.
	d, err := do.do(s.fallback, context.WithoutCancel(ctx), req)
	switch {
	case answered(err): // bad input, refused by the fallback as the primary would
		return backend.Outcome{}, fmt.Errorf("ratelimit/guard: %w", err)
	case err != nil:
		return backend.Outcome{}, fmt.Errorf("ratelimit/guard: the fallback failed: %w (the primary: %w)", err, cause)
	}
	return d, &backend.Fallback{Rules: sh.rules, Err: cause}
}

// localRequest is req under the share its fallback decides by. A cost over
// the share's MaxCost can never fit there: it is an error wrapping
// backend.ErrInvalidCost, which no failure mode admits, rather than a
// request the fallback's arithmetic was never meant to see.
func (s *Store) localRequest(req backend.Request, charge bool) (backend.Request, error) { // req.Rule: the primary's
	sh := s.shareOf(req.Rule)
	if sh.err != nil {
		return req, sh.err
	}
	if req.Cost > sh.rule.MaxCost() && !charge && req.Admitted == 0 { // a charge records past any limit; an undo gives one back
		return req, fmt.Errorf("ratelimit/guard: %w: a cost of %d is over this instance's share (%v) of %v, which decides while the primary cannot",
			backend.ErrInvalidCost, req.Cost, sh.rule, req.Rule)
	}
	req.Rule = sh.rule
	return req, nil
}

// shared is the rule the fallback decides by for a rule of the primary's,
// or why there is none; rules holds it alone, for a Take's Fallback.
type shared struct {
	rule  *backend.Rule
	rules []*backend.Rule
	err   error
}

// shareOf is rule's share, compiled once per rule (kept with it).
func (s *Store) shareOf(rule *backend.Rule) *shared {
	return rule.Own(s.owned, func(r *backend.Rule) any {
		limit, burst := s.share(r.Limit(), r.Burst())
		local, err := r.WithLimit(limit, burst)
		if err != nil {
			return &shared{err: fmt.Errorf("ratelimit/guard: the local share: %w", err)}
		}
		return &shared{rule: local, rules: []*backend.Rule{local}}
	}).(*shared)
}

// localAll asks op (TakeAll, PeekAll, ChargeAll: charge) of the fallback,
// each request under this instance's share of its rule, for the primary's
// failure cause.
func (s *Store) localAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome, op several, charge bool, cause error) error {
	if s.fallback == nil {
		return cause
	}
	shared := make([]backend.Request, len(reqs))
	for i, req := range reqs {
		validate := req.Validate
		if charge {
			validate = req.ValidateCharge
		}
		if err := validate(); err != nil { // as in local
			return fmt.Errorf("ratelimit/guard: %w", err)
		}
		var err error
		if shared[i], err = s.localRequest(req, charge); err != nil {
			return fmt.Errorf("%w (the primary: %w)", err, cause)
		}
	}
	if err := op(s.fallback, context.WithoutCancel(ctx), shared, outs); answered(err) {
		return fmt.Errorf("ratelimit/guard: %w", err)
	} else if err != nil {
		return fmt.Errorf("ratelimit/guard: the fallback failed: %w (the primary: %w)", err, cause)
	}
	rules := make([]*backend.Rule, len(shared))
	for i := range shared {
		rules[i] = shared[i].Rule
	}
	return &backend.Fallback{Rules: rules, Err: cause}
}
