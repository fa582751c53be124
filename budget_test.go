package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
)

// blockingStore holds every Take until its context is done, and records
// what that context said.
type blockingStore struct {
	failingStore
	entered chan struct{}
	value   chan any
	err     chan error
	cause   chan error
}

func newBlockingStore() *blockingStore {
	return &blockingStore{entered: make(chan struct{}, 1), value: make(chan any, 1), err: make(chan error, 1), cause: make(chan error, 1)}
}

type traceKey struct{}

func (s *blockingStore) Take(ctx context.Context, _ backend.Request) (backend.Outcome, error) {
	s.entered <- struct{}{}
	s.value <- ctx.Value(traceKey{})
	<-ctx.Done()
	s.err <- ctx.Err()
	s.cause <- context.Cause(ctx)
	return backend.Outcome{}, ctx.Err()
}

// The time budget is a standard context: a caller that goes away while the
// store call is in flight ends it at once, and the caller's values reach
// the store.
func TestTheCallersCancellationReachesACallInFlight(t *testing.T) {
	s := newBlockingStore()
	l, err := ratelimit.New(s, ratelimit.PerSecond(5), ratelimit.WithTimeout(time.Hour))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), traceKey{}, "trace-42"))
	go func() {
		<-s.entered
		cancel()
	}()
	_, err = l.Allow(ctx, "k")
	require.ErrorIs(t, err, context.Canceled, "an hour's budget, ended by the caller")
	require.ErrorIs(t, err, ratelimit.ErrStore)
	require.Equal(t, "trace-42", <-s.value, "the caller's values are kept")
	require.ErrorIs(t, <-s.err, context.Canceled)
	require.ErrorIs(t, <-s.cause, context.Canceled, "the caller's cause, not the budget's")
}

// A budget that runs out says so by its cause, which tells it from the
// caller's own deadline.
func TestABudgetThatRunsOutHasItsCause(t *testing.T) {
	s := newBlockingStore()
	l, err := ratelimit.New(s, ratelimit.PerSecond(5), ratelimit.WithTimeout(time.Millisecond))
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "k")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, <-s.err, context.DeadlineExceeded)
	require.ErrorIs(t, <-s.cause, backend.ErrBudget)

	// The caller's own, earlier deadline: the caller's cause.
	s = newBlockingStore()
	l, err = ratelimit.New(s, ratelimit.PerSecond(5), ratelimit.WithTimeout(time.Hour))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	_, err = l.Allow(ctx, "k")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	<-s.err
	cause := <-s.cause
	require.ErrorIs(t, cause, context.DeadlineExceeded)
	require.False(t, errors.Is(cause, backend.ErrBudget), "the caller's deadline is not the budget")
}

// immediate answers every Take at once, without waiting on its context:
// a layer answering in process (the near cache's denials), over a store
// with I/O.
type immediate struct{ failingStore }

// inProcess is immediate, saying so: it gets no budget.
type inProcess struct{ immediate }

func (inProcess) Info() backend.Info { return backend.Info{InProcess: true} }

// A budget makes no timer for a call that does not wait: the timer, its
// context and their cancel were four allocations and 375 ns a call, about
// a third of ratelimitd's call answered by its near cache. What is left is
// the budget itself.
func TestABudgetMakesNoTimerForACallThatDoesNotWait(t *testing.T) {
	ctx := context.Background()
	allocs := func(s backend.Store) float64 {
		l, err := ratelimit.New(s, ratelimit.PerSecond(5), ratelimit.WithTimeout(time.Hour))
		require.NoError(t, err)
		return testing.AllocsPerRun(1_000, func() { _, _ = l.Allow(ctx, "k") })
	}
	budgeted, none := allocs(immediate{}), allocs(inProcess{})
	t.Logf("allocations an Allow: %v with a budget, %v without", budgeted, none)
	require.LessOrEqual(t, budgeted, none+1, "the budget alone, no timer")
}

// Past its deadline, a budget no call waited on says so, with its cause,
// and its Done is closed; once released it is cancelled.
func TestABudgetNoneWaitedOnEndsAtItsDeadline(t *testing.T) {
	s := &recordingStore{}
	l, err := ratelimit.New(s, ratelimit.PerSecond(5), ratelimit.WithTimeout(time.Hour))
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "k")
	require.NoError(t, err)
	require.NoError(t, s.err, "within the budget")
	require.ErrorIs(t, s.ctx.Err(), context.Canceled, "released when the call returned")
	require.ErrorIs(t, context.Cause(s.ctx), context.Canceled, "released: its cause too")
	// Under a caller's context that can be cancelled (context.Cause asks
	// the context's Value for its nearest cancelCtx), released, unwaited:
	// its cause says so too, not the live caller's nil.
	caller, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = l.Allow(caller, "k")
	require.NoError(t, err)
	require.ErrorIs(t, s.ctx.Err(), context.Canceled)
	require.ErrorIs(t, context.Cause(s.ctx), context.Canceled, "released under a live caller: its cause")
	s = &recordingStore{sleep: 5 * time.Millisecond}
	l, err = ratelimit.New(s, ratelimit.PerSecond(5), ratelimit.WithTimeout(time.Millisecond))
	require.NoError(t, err)
	_, _ = l.Allow(context.Background(), "k")
	require.ErrorIs(t, s.err, context.DeadlineExceeded, "past the deadline, unwaited")
	require.ErrorIs(t, s.cause, backend.ErrBudget)
	select {
	case <-s.ctx.Done():
	default:
		t.Fatal("Done is not closed past the deadline")
	}
}

// recordingStore keeps the context of its last Take, and what it said
// after sleep without waiting on it.
type recordingStore struct {
	failingStore
	sleep      time.Duration
	ctx        context.Context
	err, cause error
}

func (s *recordingStore) Take(ctx context.Context, _ backend.Request) (backend.Outcome, error) {
	s.ctx = ctx
	time.Sleep(s.sleep)
	s.err, s.cause = ctx.Err(), context.Cause(ctx)
	return backend.Outcome{}, nil
}

// cascade is a store that asks another Limiter within its call, with the
// context it was given, and reports that context's Err after.
type cascade struct {
	failingStore
	inner *ratelimit.Limiter
	after error
}

func (s *cascade) Take(ctx context.Context, _ backend.Request) (backend.Outcome, error) {
	_, _ = s.inner.Allow(ctx, "inner")
	s.after = ctx.Err()
	return allowed(), nil
}

// A Limiter called within another's store call, under the outer budget
// (earlier than its own), does not end the outer budget when its call
// ends: that budget is not its to end.
func TestAnInnerCallLeavesTheOuterBudget(t *testing.T) {
	inner, err := ratelimit.New(immediate{}, ratelimit.PerSecond(5), ratelimit.WithTimeout(time.Hour))
	require.NoError(t, err)
	s := &cascade{inner: inner}
	outer, err := ratelimit.New(s, ratelimit.PerSecond(5), ratelimit.WithTimeout(time.Minute))
	require.NoError(t, err)
	_, err = outer.Allow(context.Background(), "outer")
	require.NoError(t, err)
	require.NoError(t, s.after, "the outer budget after the inner call")
}
