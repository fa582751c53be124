package valkey

import (
	"context"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimit-go/ratelimit/internal/rediscore"
)

// changes is Info's Changes: a subscription to the channel of changes on a
// dedicated connection (PUBLISH reaches every
// node's subscribers on a cluster), with a heartbeat of its own every half
// second; it hears every change while the heartbeat comes back (see
// rediscore.Listener). The connection is dedicated, not Receive's: Receive
// subscribes again by itself after the connection breaks, and the changes
// published meanwhile would be missed without a sign.
func (s *Store) changes(ctx context.Context, changed func(prefix, key string)) (hearing func() bool) {
	l := rediscore.NewListener(changed)
	go func() {
		for ctx.Err() == nil {
			s.c.listen(ctx, l)
			l.Lost()
			select {
			case <-ctx.Done():
			case <-time.After(rediscore.HeartbeatEvery / 5):
			}
		}
	}()
	go l.Run(ctx, func(ctx context.Context, payload string) error {
		return s.c.client.Do(ctx, s.c.client.B().Publish().Channel(rediscore.Channel).Message(payload).Build()).Error()
	})
	return l.Hearing
}

// listen subscribes on a dedicated connection and feeds l until the
// connection breaks or ctx is done.
func (c *conn) listen(ctx context.Context, l *rediscore.Listener) {
	dc, _ := c.client.Dedicate()
	defer dc.Close() // not back to the pool: the connection is subscribed
	closed := dc.SetPubSubHooks(vk.PubSubHooks{OnMessage: func(m vk.PubSubMessage) { l.Message(m.Message) }})
	if err := dc.Do(ctx, dc.B().Subscribe().Channel(rediscore.Channel).Build()).Error(); err != nil {
		return
	}
	select {
	case <-closed:
	case <-ctx.Done():
	}
}

// Publish implements rediscore.Client: a PUBLISH on the channel of changes.
func (c *conn) Publish(ctx context.Context, payload string) {
	_ = c.client.Do(ctx, c.client.B().Publish().Channel(rediscore.Channel).Message(payload).Build()).Error()
}
