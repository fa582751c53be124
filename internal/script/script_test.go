package script

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
)

// A panic of the client comes back as an error wrapping ErrStore.
func TestRecoverTurnsAPanicIntoAStoreError(t *testing.T) {
	err := func() (err error) {
		defer Recover("ratelimit/test", &err)
		panic("multi key command with different key slots are not allowed")
	}()
	require.True(t, errors.Is(err, ratelimit.ErrStore), "%v", err)
	require.ErrorContains(t, err, "ratelimit/test: the client panicked: multi key command")
}

// Bounded returns at the context's deadline while the call blocks (as
// valkey-go's does on a full ring), and a panic on its goroutine comes back
// as an error.
func TestBoundedReturnsAtTheDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := Bounded(ctx, "ratelimit/test", false, func(context.Context) (int, error) {
		<-release // ignores its context
		return 1, nil
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)

	long, cancelLong := context.WithTimeout(context.Background(), time.Minute)
	defer cancelLong()
	_, err = Bounded(long, "ratelimit/test", false, func(context.Context) (int, error) { panic("boom") })
	require.ErrorIs(t, err, ratelimit.ErrStore, "a panic on the call's goroutine")
	require.ErrorContains(t, err, "boom")
}

// go-redis can notice a deadline as a network "i/o timeout": the stores
// wrap the context's error too, so that the caller can tell (seen once in
// CI: the stalled-server test got an error that was not DeadlineExceeded).
func TestWithContextNamesTheDeadline(t *testing.T) {
	ioTimeout := errors.New("i/o timeout")
	done, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	require.ErrorIs(t, WithContext(done, ioTimeout), context.DeadlineExceeded)
	require.ErrorIs(t, WithContext(done, ioTimeout), ioTimeout)
	require.NoError(t, WithContext(done, nil))
	require.Equal(t, ioTimeout, WithContext(context.Background(), ioTimeout), "a live context adds nothing")
	wrapped := fmt.Errorf("x: %w", context.DeadlineExceeded)
	require.Equal(t, wrapped, WithContext(done, wrapped), "already said")
}

// Tag is what a cluster hashes for every server key of a caller's key.
func TestTagIsTheHashTagOfEveryKey(t *testing.T) {
	for _, key := range []string{"user42", "{user42}", "}x", "a{b}c", "%7B", "{", "}", "a}b{c"} {
		for _, k := range AllKeys("p{x}:", key) {
			require.Equal(t, HashTag(k), Tag(key), "key %q, server key %q", key, k)
		}
	}
}
