package rediscore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A listener hears while its heartbeat comes back, stops hearing (and says
// everything may have changed) when it does not, and hears again when it
// comes back; changes reach it with their prefix and key, whatever bytes
// they hold.
func TestAListenerHearsOnlyWhileItsHeartbeatComesBack(t *testing.T) {
	var mu sync.Mutex
	var changes []string
	l := NewListener(func(prefix, key string) {
		mu.Lock()
		changes = append(changes, prefix+"|"+key)
		mu.Unlock()
	})
	forgot := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range changes {
			if c == "|" {
				n++
			}
		}
		return n
	}
	var deliver atomic.Bool
	deliver.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Run(ctx, func(_ context.Context, payload string) error {
		if deliver.Load() {
			l.Message(payload)
		}
		return nil
	})
	require.Eventually(t, l.Hearing, 5*time.Second, time.Millisecond, "the first heartbeat comes back")
	require.Equal(t, 1, forgot(), "what was changed before it heard is forgotten")

	l.Message(Change("p{x}:9", "k:1"))
	l.Message("hb:another listener's")
	l.Message("garbage")
	mu.Lock()
	require.Equal(t, []string{"|", "p{x}:9|k:1"}, changes)
	mu.Unlock()

	deliver.Store(false)
	require.Eventually(t, func() bool { return !l.Hearing() }, 10*time.Second, time.Millisecond, "a heartbeat that does not come back")
	require.Equal(t, 2, forgot())
	deliver.Store(true)
	require.Eventually(t, l.Hearing, 10*time.Second, time.Millisecond, "heard again")
	require.Equal(t, 3, forgot(), "what changed meanwhile is forgotten")
}
