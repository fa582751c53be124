package valkey

import (
	"context"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimit-go/ratelimit/internal/script"
)

// Invalidations implements backend.Invalidator: a subscription to the
// channel of changes on a dedicated connection (PUBLISH reaches every
// node's subscribers on a cluster), with a heartbeat of its own every half
// second; it hears every change while the heartbeat comes back (see
// script.Listener). The connection is dedicated, not Receive's: Receive
// subscribes again by itself after the connection breaks, and the changes
// published meanwhile would be missed without a sign.
func (s *Store) Invalidations(ctx context.Context, changed func(prefix, key string)) (hearing func() bool) {
	l := script.NewListener(changed)
	go func() {
		for ctx.Err() == nil {
			s.listen(ctx, l)
			l.Lost()
			select {
			case <-ctx.Done():
			case <-time.After(script.HeartbeatEvery / 5):
			}
		}
	}()
	go l.Run(ctx, func(ctx context.Context, payload string) error {
		return s.client.Do(ctx, s.client.B().Publish().Channel(script.Channel).Message(payload).Build()).Error()
	})
	return l.Hearing
}

// listen subscribes on a dedicated connection and feeds l until the
// connection breaks or ctx is done.
func (s *Store) listen(ctx context.Context, l *script.Listener) {
	c, _ := s.client.Dedicate()
	defer c.Close() // not back to the pool: the connection is subscribed
	closed := c.SetPubSubHooks(vk.PubSubHooks{OnMessage: func(m vk.PubSubMessage) { l.Message(m.Message) }})
	if err := c.Do(ctx, c.B().Subscribe().Channel(script.Channel).Build()).Error(); err != nil {
		return
	}
	select {
	case <-closed:
	case <-ctx.Done():
	}
}

// changedKey tells the other processes' listeners of a change to key under
// prefix. A failure is not the caller's: the change itself was made, and a
// listener that missed it remembers no longer than its own bound.
func (s *Store) changedKey(ctx context.Context, prefix, key string) {
	_ = s.client.Do(ctx, s.client.B().Publish().Channel(script.Channel).Message(script.Change(prefix, key)).Build()).Error()
}
