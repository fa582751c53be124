package ratelimit

import (
	"context"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
)

// budget is ctx bounded by the time budget from now, unless it ends sooner
// already or is done. It is a standard context: the caller's cancellation
// reaches a call in flight, and when the budget itself runs out its cause is
// backend.ErrBudget, which a layer over the store (guard) tells apart from
// the caller's own deadline. Its timer costs a few allocations a call, only
// on stores with I/O (an in-process store has no budget).
func (l *Limiter) budget(ctx context.Context, now time.Time) (context.Context, context.CancelFunc) {
	if l.timeout == 0 || ctx.Err() != nil {
		return ctx, noCancel
	}
	deadline := now.Add(l.timeout)
	if d, ok := ctx.Deadline(); ok && !d.After(deadline) {
		return ctx, noCancel
	}
	return context.WithDeadlineCause(ctx, deadline, backend.ErrBudget)
}

func noCancel() {}
