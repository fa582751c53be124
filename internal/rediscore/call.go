package rediscore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
)

// Guards on a call to a client: its context's error, a panic, a client
// that does not watch its context.

// WithContext returns err, wrapping ctx's error too when ctx is done and err
// does not already: a client that notices a deadline as a network timeout
// ("i/o timeout") then still answers errors.Is(err,
// context.DeadlineExceeded), as the time budget's contract says. A deadline
// that has passed counts as done even before the context says so: a
// standard context's Err turns non-nil when its timer's goroutine runs,
// which on a busy machine comes after the connection's own deadline.
func WithContext(ctx context.Context, err error) error {
	if err == nil {
		return err
	}
	done := ctx.Err()
	if d, ok := ctx.Deadline(); done == nil && ok && !time.Now().Before(d) {
		done = context.DeadlineExceeded
	}
	if done == nil || errors.Is(err, done) {
		return err
	}
	return fmt.Errorf("%w (%w)", err, done)
}

// Recover, deferred by a backend's method, turns a panic of the client into
// an error wrapping backend.ErrStore, prefixed with the backend's name: a
// client's bug (valkey-go panics on a command whose keys are in two cluster
// slots) must not take its caller's process down.
func Recover(name string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s: the client panicked: %v: %w", name, r, backend.ErrStore)
	}
}

// Bounded runs call, returning no later than when ctx is done even if the
// client does not (call then finishes in the background, at the cost of a
// goroutine per call); honoured says the client returns by itself. A panic of
// call comes back as Recover's error.
func Bounded[T any](ctx context.Context, name string, honoured bool, call func(context.Context) (T, error)) (T, error) {
	if honoured || ctx.Done() == nil {
		return call(ctx)
	}
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		func() {
			defer Recover(name, &r.err)
			r.v, r.err = call(ctx)
		}()
		done <- r
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}
