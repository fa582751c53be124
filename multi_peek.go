package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
)

// Peek reports what every policy holds for keys[i] without taking any (a
// check before work whose usage is charged after): the strictest of their
// peeks, as AllowN would decide a request of cost 1 now, and Decisions say
// each. Failures are handled as for AllowN. When every Limiter shares a
// store that peeks at several requests in one call (backend.Store's
// PeekAll: on a server, one round trip), they are asked in one; otherwise
// one by one.
func (m *Multi) Peek(ctx context.Context, keys ...string) (MultiDecision, error) {
	if m.atomic != nil && len(keys) == len(m.limiters) && len(keys) > 1 {
		if md, ok, err := m.peekAll(ctx, keys); ok {
			return md, err
		}
	}
	return m.each(ctx, keys, func(l *Limiter, key string) (Decision, error) { return l.Peek(ctx, key) })
}

// peekAll is Peek by the shared store's PeekAll; ok is false, with nothing
// asked, when the store cannot (errors.ErrUnsupported).
func (m *Multi) peekAll(ctx context.Context, keys []string) (md MultiDecision, ok bool, err error) {
	cs := make([]*compiled, len(m.limiters))
	reqs := make([]backend.Request, len(m.limiters))
	for i, l := range m.limiters {
		if err := checkArgs(ctx, keys[i]); err != nil {
			return MultiDecision{}, true, err
		}
		if cs[i], err = l.request(ctx, keys[i], 1, &reqs[i]); err != nil {
			return MultiDecision{}, true, fmt.Errorf("%w (%s)", err, l.name)
		}
	}
	began := time.Now()
	sctx, budget := m.limiters[0].budget(ctx, began)
	outs := make([]backend.Outcome, len(reqs))
	err = m.atomic.PeekAll(sctx, reqs, outs)
	budget.end()
	if errors.Is(err, errors.ErrUnsupported) {
		return MultiDecision{}, false, nil
	}
	md = MultiDecision{Decisions: make([]Decision, len(m.limiters)), Policies: make([]Policy, len(m.limiters))}
	var errs []error
	for i, l := range m.limiters {
		md.Policies[i] = cs[i].policy
		d, lerr := l.settle(ctx, cs[i], reqs[i], OpPeek, true, &outs[i], shareOf(err, len(reqs), i), began)
		if lerr != nil {
			errs = append(errs, fmt.Errorf("%s: %w", l.name, lerr))
			continue
		}
		md.Decisions[i] = d
	}
	md.decide(m.limiters)
	return md, true, errors.Join(errs...)
}

// shareOf is err, the error of one call deciding n requests, as the i-th
// request's own: a stand-in's decisions (a *backend.Fallback naming a rule
// for each request) are settled one by one, each under its own rule.
func shareOf(err error, n, i int) error {
	if err == nil { // the common call: errors.As's target would escape for nothing
		return nil
	}
	var fb *backend.Fallback
	if errors.As(err, &fb) && len(fb.Rules) == n {
		return &backend.Fallback{Rules: fb.Rules[i : i+1], Err: fb.Err}
	}
	return err
}
