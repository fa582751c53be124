package redis

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/backend"
)

// WithAutoPipeline sends decisions through the client's auto-pipeliner
// (go-redis's AsyncAutoPipelineWithOptions, with opts; nil: the client's
// Options.AutoPipelineOptions, else go-redis's defaults): the decisions
// that concurrent callers make while a batch is on the wire go together in
// the next one, one write and one read for all of them, where each would
// otherwise take a pooled connection and a round trip of its own. A lone
// caller's decision is sent at once.
//
// Each call still returns by its context's deadline, whether or not the
// client has ContextTimeoutEnabled (its command may then still run, as a
// call that timed out may), a call whose context is done sends nothing,
// and a decision whose connection broke is not sent again. go-redis's
// hooks see the auto-pipeliner's work as go-redis documents it (in
// batches, not one call per decision). Decisions that wait for replicas
// (WithReplicaAck) and Reset do not ride it.
//
// A client without an auto-pipeliner (a Ring), or opts go-redis refuses, is
// an error of New wrapping backend.ErrInvalidArgument. The pipeliner is the
// client's own (go-redis keeps one per client): closing the client closes
// it. go-redis marks the API experimental. docs/figures.md measures it
// beside the plain client and valkey-go (`go run ./bench/peers -backend
// network`, cmd/ratelimitd/bench). Its full duplex (FullDuplex) measured
// about the same there, but under a busy machine spread 64 callers over
// as many connections as the pool allowed.
func WithAutoPipeline(opts *goredis.AutoPipelineOptions) Option {
	return func(c *conn) { c.autoPipeline, c.autoOptions = true, opts }
}

// autoPipelines is what WithAutoPipeline needs of a client: go-redis's
// Client (a failover client too) and ClusterClient have it.
type autoPipelines interface {
	AsyncAutoPipelineWithOptions(*goredis.AutoPipelineOptions) (*goredis.AutoPipeliner, error)
}

// startPipeline gets client's auto-pipeliner if the options ask for one.
func (c *conn) startPipeline(client Client) error {
	if !c.autoPipeline {
		return nil
	}
	ap, ok := client.(autoPipelines)
	if !ok {
		return fmt.Errorf("%s: %w: WithAutoPipeline: a %T has no auto-pipeliner", name, backend.ErrInvalidArgument, client)
	}
	p, err := ap.AsyncAutoPipelineWithOptions(c.autoOptions)
	if err != nil {
		return fmt.Errorf("%s: %w: WithAutoPipeline: %w", name, backend.ErrInvalidArgument, err)
	}
	c.pipe = p
	return nil
}

// process sends cmd, through the auto-pipeliner if there is one. A call
// that gave up at its context's end must not read cmd: its batch may still
// be filling it in. The auto-pipeliner queues a command whatever its
// context, so a context done already sends nothing.
func (c *conn) process(ctx context.Context, cmd script) (done bool, err error) {
	if c.pipe == nil {
		return true, c.client.Process(ctx, cmd)
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	err = c.pipe.Submit(ctx, cmd).WaitContext(ctx)
	if err != nil && err == ctx.Err() {
		return false, err
	}
	return true, err
}
