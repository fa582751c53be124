package grpclimit

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/ratelimit-go/ratelimit"
)

// usageKey is the context key of a call's usage recorder.
type usageKey struct{}

// ReportUsage adds n to what the call whose context is ctx used (an LLM's
// tokens, bytes streamed), for the Usage rules of the Interceptor that
// admitted it, which charge it once the handler returns. A handler calls it
// with its call's context (a stream's, ss.Context()), as often as it likes;
// outside such a call it does nothing.
func ReportUsage(ctx context.Context, n int) {
	if u, ok := ctx.Value(usageKey{}).(*atomic.Int64); ok && n > 0 {
		u.Add(int64(n))
	}
}

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
	return context.WithValue(ctx, usageKey{}, a.used)
}

// settle charges each Usage rule what was used beyond what it took before,
// or gives back what was not used: nothing when both are 0. It outlives a
// client gone (the usage was spent); its errors reach the Limiters'
// observers.
func (a *admission) settle(ctx context.Context, rules []Rule) {
	ctx, used := context.WithoutCancel(ctx), int(a.used.Load())
	for i, rule := range rules {
		if rule.Usage && used != a.costs[i] {
			_, _ = rule.Limiter.Settle(ctx, a.keys[i], a.d.Decisions[i], a.costs[i], used)
		}
	}
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
	held := make([]*ratelimit.Permit, 0, len(i.permits))
	for _, rule := range i.permits {
		key, err := rule.Key(ctx, method)
		if err == nil && key == "" {
			err = ErrNoKey
		}
		var p *ratelimit.Permit
		var d ratelimit.Decision
		if err == nil {
			p, d, err = rule.Limiter.Acquire(ctx, key)
		}
		if err != nil || p == nil {
			release(ctx, held)
			if err != nil {
				return nil, i.onError(ctx, err)
			}
			return nil, exhausted(d, rule.Limiter.Name())
		}
		held = append(held, p)
	}
	return held, nil
}

// release gives permits back; a failure ends a lease by itself.
func release(ctx context.Context, permits []*ratelimit.Permit) {
	ctx = context.WithoutCancel(ctx) // the client gone, the permit still goes back
	for _, p := range permits {
		_ = p.Release(ctx)
	}
}
