package redis

import (
	"context"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/internal/rediscore"
)

// subscriber is what the channel of changes needs of a client beyond
// Client: every go-redis client has it.
type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *goredis.PubSub
	Publish(ctx context.Context, channel string, message any) *goredis.IntCmd
}

// changes is Info's Changes: a subscription to the channel of changes
// (PUBLISH reaches every node's subscribers on a cluster), with a
// heartbeat of its own every half second; it hears every change while the
// heartbeat comes back (see rediscore.Listener). A client without Subscribe
// never hears.
func (s *Store) changes(ctx context.Context, changed func(prefix, key string)) (hearing func() bool) {
	l := rediscore.NewListener(changed)
	sub, ok := s.c.client.(subscriber)
	if !ok {
		return l.Hearing
	}
	go func() {
		ps := sub.Subscribe(ctx, rediscore.Channel)
		stop := context.AfterFunc(ctx, func() { _ = ps.Close() }) // a Receive does not watch ctx
		defer stop()
		for ctx.Err() == nil {
			msg, err := ps.Receive(ctx)
			if err != nil {
				l.Lost() // go-redis subscribes again on the next Receive
				select {
				case <-ctx.Done():
				case <-time.After(rediscore.HeartbeatEvery / 5):
				}
				continue
			}
			if m, ok := msg.(*goredis.Message); ok {
				l.Message(m.Payload)
			}
		}
		_ = ps.Close()
	}()
	go l.Run(ctx, func(ctx context.Context, payload string) error {
		return sub.Publish(ctx, rediscore.Channel, payload).Err()
	})
	return l.Hearing
}

// Publish implements rediscore.Client: a PUBLISH on the channel of changes.
func (c *conn) Publish(ctx context.Context, payload string) {
	if sub, ok := c.client.(subscriber); ok {
		ctx, cancel := c.capped(ctx)
		defer cancel()
		_ = sub.Publish(ctx, rediscore.Channel, payload).Err()
	}
}
