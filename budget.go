package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
)

// budget is ctx bounded by the time budget from now, unless it ends sooner
// already or is done. It is a standard context: the caller's cancellation
// reaches a call in flight, and when the budget itself runs out its cause is
// backend.ErrBudget, which a layer over the store (guard) tells apart from
// the caller's own deadline. Only stores with I/O have a budget (an
// in-process store has none), and its timer is made only when a call waits
// (see budgetCtx).
// The call ends the budget it got (nil: none was made) with its end
// method, not a CancelFunc: a method value returned would be one more
// allocation a call.
func (l *Limiter) budget(ctx context.Context, now time.Time) (context.Context, *budgetCtx) {
	if l.timeout == 0 || ctx.Err() != nil {
		return ctx, nil
	}
	deadline := now.Add(l.timeout)
	if d, ok := ctx.Deadline(); ok && !d.After(deadline) {
		return ctx, nil // the caller's, perhaps another Limiter's budget: not this call's to end
	}
	b := &budgetCtx{parent: ctx, deadline: deadline}
	return b, b
}

// budgetCtx is context.WithDeadlineCause(parent, deadline,
// backend.ErrBudget), made (armed) only once a call waits on it (Done, and
// so context.AfterFunc and a child's WithCancel) or asks after the deadline
// what ended it: a call that a layer answers in process, as the near
// cache's denials, makes no timer. The timer and its context cost 375 ns
// and four allocations a call (a benchmark of WithDeadlineCause and its
// cancel), about a third of a Limiter's call answered by the near cache in
// ratelimitd's profile. Until armed, Err reads the clock against the
// deadline, as the timer would have fired by then.
type budgetCtx struct {
	parent   context.Context
	deadline time.Time
	once     sync.Once
	armed    atomic.Bool
	released atomic.Bool
	ctx      context.Context // armed: WithDeadlineCause's; set once, before armed
	cancel   context.CancelFunc
}

// arm makes the deadline's context, once; one made after release is
// cancelled at once, as release would have.
func (b *budgetCtx) arm() context.Context {
	b.once.Do(func() {
		b.ctx, b.cancel = context.WithDeadlineCause(b.parent, b.deadline, backend.ErrBudget)
		b.armed.Store(true)
		if b.released.Load() {
			b.cancel()
		}
	})
	return b.ctx
}

// end ends the budget, if one was made: the call is over.
func (b *budgetCtx) end() {
	if b != nil {
		b.release()
	}
}

// release is end's, on a budget that was made.
func (b *budgetCtx) release() {
	b.released.Store(true)
	if b.armed.Load() {
		b.cancel()
	}
}

func (b *budgetCtx) Deadline() (time.Time, bool) { return b.deadline, true }

func (b *budgetCtx) Done() <-chan struct{} { return b.arm().Done() }

func (b *budgetCtx) Err() error {
	if b.armed.Load() {
		return b.ctx.Err()
	}
	if b.released.Load() {
		return context.Canceled
	}
	if err := b.parent.Err(); err != nil {
		return err
	}
	if time.Now().Before(b.deadline) {
		return nil
	}
	return b.arm().Err() // past the deadline: armed, so that its cause says whose
}

func (b *budgetCtx) Value(key any) any {
	if !b.armed.Load() && !b.released.Load() && time.Now().Before(b.deadline) {
		return b.parent.Value(key) // context.Cause finds the parent's: this one is not done
	}
	// Done: an armed one answers, its cause its own (before Go 1.24,
	// context.Cause took the nearest cancelCtx's cause, nil for a live
	// caller's, though Err said Canceled).
	return b.arm().Value(key)
}

func (b *budgetCtx) String() string { return "ratelimit budget" }
