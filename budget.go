package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A time budget is a context with a deadline, made for every store call, so
// it must be cheap: context.WithTimeout costs a timer, a closure, a channel
// and the context, four allocations on the path of every decision. A
// budgetCtx costs one allocation: its Done
// channel is shared by every call whose deadline falls in the same
// millisecond, closed by one timer; Deadline and Err are exact.

// budgetCtx is parent bounded by deadline. It keeps parent's values; it does
// not see parent's cancellation while the call is in flight (a caller that
// goes away waits at most the budget); a parent already done is not wrapped.
type budgetCtx struct {
	context.Context
	deadline time.Time
	done     <-chan struct{}
}

func (c *budgetCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *budgetCtx) Done() <-chan struct{}       { return c.done }

func (c *budgetCtx) Err() error {
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// Value answers budgetKey with the caller's own context (see
// CallerContext), and the rest as the caller's context does.
func (c *budgetCtx) Value(key any) any {
	if key == (budgetKey{}) {
		return c.Context
	}
	return c.Context.Value(key)
}

type budgetKey struct{}

// CallerContext is the caller's own context in ctx, a context a Limiter
// passed to its store: without the time budget the Limiter bounded it by
// (WithTimeout), or ctx itself when the Limiter set no budget (the caller's
// deadline came first, or the store is in process). A layer over a store,
// such as guard, tells by it a budget that ran out (the store did not
// answer in time: its failure) from a caller that went away or whose own
// deadline passed (CallerContext(ctx).Err() != nil).
func CallerContext(ctx context.Context) context.Context {
	if parent, ok := ctx.Value(budgetKey{}).(context.Context); ok {
		return parent
	}
	return ctx
}

// String helps debugging, as the context package's own contexts do.
func (c *budgetCtx) String() string { return "ratelimit.budget(" + c.deadline.String() + ")" }

// deadlines hands out Done channels that close at (or up to a millisecond
// after) a deadline, one per millisecond in use.
type deadlines struct {
	current atomic.Pointer[deadlineBucket]
	mu      sync.Mutex // serialises making a bucket
}

type deadlineBucket struct {
	end  time.Time // the channel closes at end
	done chan struct{}
}

// bucketSpan is how late a shared Done channel may close after a deadline.
const bucketSpan = time.Millisecond

// done returns a channel closed no earlier than deadline and at most
// bucketSpan after it.
func (d *deadlines) done(deadline time.Time) <-chan struct{} {
	if b := d.current.Load(); b != nil && !b.end.Before(deadline) && b.end.Sub(deadline) <= bucketSpan {
		return b.done
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if b := d.current.Load(); b != nil && !b.end.Before(deadline) && b.end.Sub(deadline) <= bucketSpan {
		return b.done
	}
	b := &deadlineBucket{end: deadline.Add(bucketSpan), done: make(chan struct{})}
	time.AfterFunc(time.Until(b.end), func() { close(b.done) })
	d.current.Store(b)
	return b.done
}
