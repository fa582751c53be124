package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type ctxKey struct{}

func TestTheBudgetContext(t *testing.T) {
	l := &Limiter{timeout: 30 * time.Millisecond}
	parent := context.WithValue(context.Background(), ctxKey{}, "trace-42")
	began := time.Now()
	ctx, cancel := l.budget(parent, began)
	defer cancel()

	deadline, ok := ctx.Deadline()
	require.True(t, ok)
	require.WithinDuration(t, began.Add(30*time.Millisecond), deadline, 5*time.Millisecond)
	require.Equal(t, "trace-42", ctx.Value(ctxKey{}), "the caller's values are kept")
	if err := ctx.Err(); time.Now().Before(deadline) { // unless the machine held this goroutine past it
		require.NoError(t, err, "no error before the deadline")
	}
	// Done is closed by a timer set at most bucketSpan after the deadline:
	// the bucket's end, checked rather than timed (a busy machine wakes the
	// waiter as late as it pleases).
	bucket := l.deadlines.current.Load()
	require.Equal(t, (<-chan struct{})(bucket.done), ctx.Done())
	require.False(t, bucket.end.Before(deadline), "the timer that closes Done fires no earlier than the deadline")
	require.LessOrEqual(t, bucket.end.Sub(deadline), bucketSpan, "and at most bucketSpan after it")
	<-ctx.Done()
	require.False(t, time.Now().Before(deadline), "Done never closes before the deadline")
	require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)

	// Calls whose deadlines fall in one millisecond share one channel.
	a, _ := l.budget(context.Background(), time.Now())
	b, _ := l.budget(context.Background(), time.Now())
	da, _ := a.Deadline()
	db, _ := b.Deadline()
	if db.Sub(da) < bucketSpan/2 {
		require.Equal(t, a.Done(), b.Done())
	}

	// The caller's earlier deadline, or a context already done, is used as is.
	early, cancelEarly := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancelEarly()
	got, _ := l.budget(early, time.Now())
	require.Equal(t, early, got)
	gone, cancelGone := context.WithCancel(context.Background())
	cancelGone()
	got, _ = l.budget(gone, time.Now())
	require.Equal(t, gone, got)
	require.ErrorIs(t, got.Err(), context.Canceled)
}
