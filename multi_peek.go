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
	if m.shared != nil && len(keys) == len(m.limiters) && len(keys) > 1 {
		if md, ok, err := m.peekAll(ctx, keys); ok {
			return md, err
		}
	}
	return m.each(ctx, keys, func(l *Limiter, key string) (Decision, error) { return l.Peek(ctx, key) })
}

// peekAll is Peek by the shared store's PeekAll; ok is false, with nothing
// asked, when the store cannot (errors.ErrUnsupported).
func (m *Multi) peekAll(ctx context.Context, keys []string) (MultiDecision, bool, error) {
	return m.together(ctx, keys, 1, OpPeek, backend.Store.PeekAll)
}

// together asks call of the shared store for every Limiter's request of
// keys[i] at cost, in one call, and settles each as op; ok is false, with
// nothing asked, when the store cannot (errors.ErrUnsupported). A call that
// fails on one shard after charges on others (a ChargeAll's ShardError)
// settles those charges as made.
func (m *Multi) together(ctx context.Context, keys []string, cost int, op Op, call func(backend.Store, context.Context, []backend.Request, []backend.Outcome) error) (md MultiDecision, ok bool, err error) {
	cs := make([]*compiled, len(m.limiters))
	reqs := make([]backend.Request, len(m.limiters))
	for i, l := range m.limiters {
		if err := checkArgs(ctx, keys[i]); err != nil {
			return MultiDecision{}, true, err
		}
		if cs[i], err = l.request(ctx, keys[i], 1, &reqs[i]); err != nil {
			return MultiDecision{}, true, fmt.Errorf("%w (%s)", err, l.name)
		}
		reqs[i].Cost = int64(cost)
	}
	began := time.Now()
	sctx, budget := m.limiters[0].budget(ctx, began)
	outs := make([]backend.Outcome, len(reqs))
	err = call(m.shared, sctx, reqs, outs)
	budget.end()
	if errors.Is(err, errors.ErrUnsupported) {
		return MultiDecision{}, false, nil
	}
	partly := err != nil && shardFailed(err)
	md = MultiDecision{Decisions: make([]Decision, len(m.limiters)), Policies: make([]Policy, len(m.limiters))}
	var errs []error
	for i, l := range m.limiters {
		md.Policies[i] = cs[i].policy
		share := shareOf(err, len(reqs), i)
		if partly && outs[i].At != 0 { // made on a shard that answered
			share = nil
		}
		d, lerr := l.settle(ctx, cs[i], reqs[i], op, true, &outs[i], share, began)
		if lerr != nil {
			errs = append(errs, fmt.Errorf("%s: %w", l.name, lerr))
			continue
		}
		md.Decisions[i] = d
	}
	md.decide(m.limiters)
	return md, true, errors.Join(errs...)
}

// shardFailed reports whether err is a ShardError: a call that failed on
// one shard of a cluster. Its own function: the target errors.As takes
// escapes, and a call that did not fail would allocate it all the same.
func shardFailed(err error) bool {
	var shard *backend.ShardError
	return errors.As(err, &shard)
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
