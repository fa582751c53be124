package httplimit

import (
	"context"
	"net/http"
	"sync/atomic"

	"github.com/ratelimit-go/ratelimit"
)

// usageKey is the context key of a request's usage recorder.
type usageKey struct{}

// ReportUsage adds n to what the request whose context is ctx used (an
// LLM's tokens, bytes sent), for the Usage rules of the Middleware that
// admitted it, which charge it once the handler returns. A handler calls it
// with its request's context, as often as it likes; outside such a request
// (no Usage rule, another context) it does nothing.
func ReportUsage(ctx context.Context, n int) {
	if u, ok := ctx.Value(usageKey{}).(*atomic.Int64); ok && n > 0 {
		u.Add(int64(n))
	}
}

// costs is what the request takes from each rule before the handler runs.
func (m *Middleware) costs(r *http.Request) ([]int, error) {
	costs := make([]int, len(m.rules))
	for i, rule := range m.rules {
		switch {
		case rule.Cost != nil:
			c, err := rule.Cost(r)
			if err != nil {
				return nil, err
			}
			costs[i] = c
		case !rule.Usage:
			costs[i] = 1
		}
	}
	return costs, nil
}

// serveAndSettle serves the admitted request, its context carrying the
// usage recorder of the Usage rules, then settles each of them: charges
// what was reported beyond what its Cost took, or gives back what was not
// used. The settling outlives a client gone (the usage was spent) and its
// errors reach the Limiters' observers, the response being written.
func (m *Middleware) serveAndSettle(w http.ResponseWriter, r *http.Request, next http.Handler, keys []string, costs []int, d ratelimit.MultiDecision) {
	used := new(atomic.Int64)
	next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), usageKey{}, used)))
	settle(context.WithoutCancel(r.Context()), m.rules, keys, costs, d, int(used.Load()))
}

// settle charges each Usage rule what was used beyond what it reserved
// before the work (costs[i], the admission d.Decisions[i]), or gives back
// what was not used: nothing when both are 0.
func settle(ctx context.Context, rules []Rule, keys []string, costs []int, d ratelimit.MultiDecision, used int) {
	for i, rule := range rules {
		if rule.Usage && used != costs[i] {
			_, _ = rule.Limiter.Settle(ctx, keys[i], d.Decisions[i], costs[i], used)
		}
	}
}

// acquire takes a permit of each InFlight rule for r: the permits held, or
// the first denial (every permit taken before it given back).
func (m *Middleware) acquire(r *http.Request) ([]*ratelimit.Permit, *ratelimit.MultiDecision, error) {
	held := make([]*ratelimit.Permit, 0, len(m.permits))
	for _, rule := range m.permits {
		key, err := rule.Key(r)
		if err == nil && key == "" {
			err = ErrNoKey
		}
		var p *ratelimit.Permit
		var d ratelimit.Decision
		if err == nil {
			p, d, err = rule.Limiter.Acquire(r.Context(), key)
		}
		if err != nil || p == nil {
			release(r.Context(), held)
			if err != nil {
				return nil, nil, err
			}
			return nil, &ratelimit.MultiDecision{Decision: d, Name: rule.Limiter.Name(),
				Decisions: []ratelimit.Decision{d}, Policies: []ratelimit.Policy{rule.Limiter.Policy()}}, nil
		}
		held = append(held, p)
	}
	return held, nil, nil
}

// release gives permits back; a failure ends a lease by itself.
func release(ctx context.Context, permits []*ratelimit.Permit) {
	ctx = context.WithoutCancel(ctx) // the client gone, the permit still goes back
	for _, p := range permits {
		_ = p.Release(ctx)
	}
}
