package httplimit

import (
	"context"
	"net/http"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/frontend"
)

// ReportUsage adds n to what the request whose context is ctx used (an
// LLM's tokens, bytes sent), for the Usage rules of the Middleware that
// admitted it, which charge it once the handler returns. A handler calls it
// with its request's context, as often as it likes; outside such a request
// (no Usage rule, another context) it does nothing.
func ReportUsage(ctx context.Context, n int) { frontend.Report(ctx, n) }

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
// used (frontend.Settle), the response being written.
func (m *Middleware) serveAndSettle(w http.ResponseWriter, r *http.Request, next http.Handler, keys []string, costs []int, d ratelimit.MultiDecision) {
	ctx, used := frontend.WithUsage(r.Context())
	next.ServeHTTP(w, r.WithContext(ctx))
	frontend.Settle(r.Context(), len(m.rules), func(i int) (*ratelimit.Limiter, bool) { return m.rules[i].Limiter, m.rules[i].Usage },
		keys, costs, d, int(used.Load()))
}

// acquire takes a permit of each InFlight rule for r: the permits held, or
// the first denial (every permit taken before it given back).
func (m *Middleware) acquire(r *http.Request) ([]*ratelimit.Permit, *ratelimit.MultiDecision, error) {
	held, denied, d, err := frontend.Acquire(r.Context(), len(m.permits), func(i int) (*ratelimit.Limiter, string, error) {
		key, err := m.permits[i].Key(r)
		if err == nil && key == "" {
			err = ErrNoKey
		}
		return m.permits[i].Limiter, key, err
	})
	if err != nil || denied < 0 {
		return held, nil, err
	}
	l := m.permits[denied].Limiter
	return nil, &ratelimit.MultiDecision{Decision: d, Name: l.Name(), Decisions: []ratelimit.Decision{d}, Policies: []ratelimit.Policy{l.Policy()}}, nil
}
