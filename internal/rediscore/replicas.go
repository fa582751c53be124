package rediscore

import (
	"errors"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
)

// ErrNotReplicated is the error of a write that fewer replicas acknowledged
// in time than a store built WithReplicaAck asks for; the Redis and Valkey
// stores export it under their own names.
var ErrNotReplicated = errors.New("ratelimit: not acknowledged by the replicas in time")

// Acked is nil when got replicas acknowledged a write that want must, else
// an error wrapping ErrNotReplicated and backend.ErrStore.
func Acked(got, want int64, timeout time.Duration) error {
	if got < want {
		return fmt.Errorf("%w: %d of %d replicas within %v: %w", ErrNotReplicated, got, want, timeout, backend.ErrStore)
	}
	return nil
}
