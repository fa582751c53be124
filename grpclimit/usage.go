package grpclimit

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/frontend"
)

// ReportUsage adds n to what the call whose context is ctx used (an LLM's
// tokens, bytes streamed), for the Usage rules of the Interceptor that
// admitted it, which charge it once the handler returns. A handler calls it
// with its call's context (a stream's, ss.Context()), as often as it likes;
// outside such a call it does nothing.
func ReportUsage(ctx context.Context, n int) { frontend.Report(ctx, n) }

// admission is an admitted call's, to settle once its handler returns:
// each rule's key and what it took before, the decision, and what the
// handler reported.
type admission struct {
	keys  []string
	costs []int
	d     ratelimit.MultiDecision
	used  *atomic.Int64
}

// context is ctx carrying the call's usage recorder.
func (a *admission) context(ctx context.Context) context.Context {
	ctx, a.used = frontend.WithUsage(ctx)
	return ctx
}

// settle charges each Usage rule what was used beyond what it took before,
// or gives back what was not used (frontend.Settle).
func (a *admission) settle(ctx context.Context, rules []Rule) {
	if a.used == nil { // the handler never ran
		return
	}
	frontend.Settle(ctx, len(rules), func(i int) (*ratelimit.Limiter, bool) { return rules[i].Limiter, rules[i].Usage },
		a.keys, a.costs, a.d, int(a.used.Load()))
}

// costs is what the call takes from each rule before its handler runs.
func (i *Interceptor) costs(ctx context.Context, method string) ([]int, error) {
	costs := make([]int, len(i.rules))
	for n, rule := range i.rules {
		switch {
		case rule.Cost != nil:
			c, err := rule.Cost(ctx, method)
			if err != nil {
				return nil, err
			}
			costs[n] = c
		case !rule.Usage:
			costs[n] = 1
		}
	}
	return costs, nil
}

// usageStream is a stream whose context carries its usage recorder.
type usageStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *usageStream) Context() context.Context { return s.ctx }

// acquire takes a permit of each InFlight rule for the call: the permits
// held, or the error the call fails with (a denial is ResourceExhausted;
// every permit taken before it is given back).
func (i *Interceptor) acquire(ctx context.Context, method string) ([]*ratelimit.Permit, error) {
	held, denied, d, err := frontend.Acquire(ctx, len(i.permits), func(n int) (*ratelimit.Limiter, string, error) {
		key, err := i.permits[n].Key(ctx, method)
		if err == nil && key == "" {
			err = ErrNoKey
		}
		return i.permits[n].Limiter, key, err
	})
	switch {
	case err != nil:
		return nil, i.onError(ctx, err)
	case denied >= 0:
		return nil, exhausted(d, i.permits[denied].Limiter.Name())
	}
	return held, nil
}
