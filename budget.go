package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A time budget is a context with a deadline, made for every store call, so
// it must be cheap: context.WithTimeout costs a timer, a closure, a channel
// and the context (four allocations, a quarter of the Valkey backend's
// throughput at 64 goroutines). A budgetCtx costs one allocation: its Done
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
