package redis

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/rediscore"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
)

// Option configures a Store.
type Option func(*conn)

// ErrNotReplicated is wrapped (with backend.ErrStore) by the error of a write
// that fewer replicas than WithReplicaAck asks for acknowledged in time.
var ErrNotReplicated = rediscore.ErrNotReplicated

// WithReplicaAck makes every write (Take, TakeAll, Refund, Reset) wait until
// replicas replicas hold it, for at most timeout: WAIT goes in the same round
// trip as the script (a pipeline on the key's master), so a failover never
// forgets an admission the caller was told of. A write they did not all
// acknowledge in time is an error wrapping ErrNotReplicated and
// backend.ErrStore, and the Limiter's failure mode answers: the master did
// record it, and a failover now may forget it. Replication stays
// asynchronous for the server; the cost is the replicas' round trip on
// every write (go run ./bench -replicas 1 measures it). replicas must be at
// least 1 and timeout at least a millisecond, below the Limiter's budget.
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return func(c *conn) { c.ackReplicas, c.ackTimeout = replicas, timeout }
}

// pipeliner is what WithReplicaAck needs of a client beyond Client: every
// go-redis client has it.
type pipeliner interface {
	Pipeline() goredis.Pipeliner
}

// pipelineFor is the client to pipeline a write and its WAIT on: the
// master of key's slot on a cluster (WAIT has no key to route it by), else
// the store's client.
func (c *conn) pipelineFor(ctx context.Context, key string) (pipeliner, error) {
	if c.masterFor != nil {
		return c.masterFor(ctx, lua.Tag(key))
	}
	if p, ok := c.client.(pipeliner); ok {
		return p, nil
	}
	return nil, fmt.Errorf("the client %T has no Pipeline for WithReplicaAck: %w", c.client, backend.ErrStore)
}

// ackedBy requires wait's reply to count the replicas asked for.
func (c *conn) ackedBy(wait *goredis.Cmd) error {
	got, err := wait.Int64()
	if err != nil {
		return err
	}
	return rediscore.Acked(got, int64(c.ackReplicas), c.ackTimeout)
}

// deleteAcked deletes keys, the state of key, with WAIT in one pipeline.
func (c *conn) deleteAcked(ctx context.Context, keys []string, key string) error {
	target, err := c.pipelineFor(ctx, key)
	if err != nil {
		return err
	}
	pipe := target.Pipeline()
	pipe.Del(ctx, keys...)
	wait := pipe.Do(ctx, "wait", c.ackReplicas, c.ackTimeout.Milliseconds())
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	return c.ackedBy(wait)
}

// runAcked runs the script's words as cmd and WAIT in one pipeline on the
// master of key's slot, and requires the replicas' acknowledgement.
func runAcked[R any, C replying[R]](ctx context.Context, c *conn, cmd C, words []any, key string) (R, error) {
	var none R
	target, err := c.pipelineFor(ctx, key)
	if err != nil {
		return none, err
	}
	run := func() (*goredis.Cmd, error) {
		pipe := target.Pipeline()
		cmd.build(ctx, words)
		_ = pipe.Process(ctx, cmd)
		wait := pipe.Do(ctx, "wait", c.ackReplicas, c.ackTimeout.Milliseconds())
		_, err := pipe.Exec(ctx)
		return wait, err
	}
	wait, err := run()
	if err != nil && goredis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		noScript(words)
		wait, err = run()
	}
	if err != nil {
		return none, err
	}
	if err := c.ackedBy(wait); err != nil {
		return none, err
	}
	return cmd.Val(), nil
}
