// Package valkey is the backend.Store on Valkey (or Redis), through
// github.com/valkey-io/valkey-go.
//
// It runs the same Lua scripts as the Redis backend, with the same key names
// and the same server clock (read about once a second and estimated between:
// see the Redis backend's Clock), so a key written through one backend reads the
// same through the other. Each decision is one FCALL of the function of
// its algorithm (the store loads the library on the first "Function not
// found"), or on a server without functions (or whose ACL forbids them)
// one EVALSHA (valkey-go falls back to EVAL on NOSCRIPT); valkey-go
// pipelines the commands of concurrent callers on shared connections
// automatically, which is where this backend gets its throughput under
// load. Reset is one DEL. Several policies on one caller's key are
// decided together by one script (TakeAll).
//
// valkey-go honours the context's deadline, but for one case that the store
// covers itself (see exec). A call that timed out may still have been decided
// on the server. A panic of the client is returned as an
// error wrapping backend.ErrStore. See package ratelimit for the clock
// options and docs/keys.md for the key layout.
package valkey

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/rediscore"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
)

// name begins every error of the store.
const name = "ratelimit/valkey"

// Store is the Valkey backend.Store: the shared Redis-protocol core
// (rediscore.Store) over valkey-go (conn). It holds no state of its own but a
// cluster's layout, and does not own the client: close the client when
// done. It is the whole backend.Store: Take, Peek, Charge, Refund,
// Acquire, Release, TakeAll and Reset, each one FCALL (or EVALSHA), the
// engine's own methods; Charge, Refund and Reset then PUBLISH the change
// on the channel of changes (see Info).
type Store struct {
	core // every operation of the contract but Info, one script each
	c    *conn
}

// Store is a whole store: every operation of the contract.
var _ backend.Store = (*Store)(nil)

// conn is rediscore.Client through a valkey-go client.
type conn struct {
	client vk.Client
	// ones are the scripts of one request by algorithm, allLua the one of
	// TakeAll (lua.For, lua.All).
	ones   [lua.Algorithms]*vk.Lua
	allLua *vk.Lua
	args   *lua.ArgCache[string]
	// lastTimeout is when a call last timed out (Unix ns), 0 for never:
	// for boundFor after it, calls are bounded by the store (see exec).
	lastTimeout atomic.Int64
	nodes       nodes // a cluster's layout (see Node)
	// ackReplicas, if not 0, is how many replicas must acknowledge every
	// write within ackTimeout (WithReplicaAck).
	ackReplicas int
	ackTimeout  time.Duration
}

// boundFor is how long after a timeout the store bounds its calls itself.
// valkey-go honours the context's deadline, except when a connection's ring
// of commands awaiting replies is full: a caller then waits for a slot
// without looking at its context (rueidis issue 858). The ring fills only
// with commands abandoned at their deadline, so for a while after a timeout
// the store bounds each call itself (a goroutine per call); a healthy store
// pays one atomic load.
const boundFor = 10 * time.Second

// execBounded runs the script on a goroutine of its own, returning when ctx
// is done. It works on copies of keys and args, so that the healthy path's
// stay on the stack.
func (c *conn) execBounded(ctx context.Context, script *vk.Lua, alg int, keys, args []string) (vk.ValkeyMessage, error) {
	keys, args = slices.Clone(keys), slices.Clone(args)
	return rediscore.Bounded(ctx, name, false, func(ctx context.Context) (vk.ValkeyMessage, error) {
		return c.call(ctx, script, alg, keys, args)
	})
}

// exec runs script, of alg (-1: All; script nil: alg's function) on
// keys with args (see call), bounded by the store after a timeout.
func (c *conn) exec(ctx context.Context, script *vk.Lua, alg int, keys, args []string) (vk.ValkeyMessage, error) {
	var reply vk.ValkeyMessage
	var err error
	if last := c.lastTimeout.Load(); last == 0 || time.Since(time.Unix(0, last)) >= boundFor {
		reply, err = c.call(ctx, script, alg, keys, args) // the healthy path: no closure
	} else {
		reply, err = c.execBounded(ctx, script, alg, keys, args)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		c.lastTimeout.Store(time.Now().UnixNano())
	}
	return reply, err
}

// New returns a Store deciding on client's server (standalone, sentinel or
// cluster). A nil client, or an option out of its bounds (WithReplicaAck),
// is an error wrapping backend.ErrInvalidArgument.
func New(client vk.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%s: %w: nil client", name, backend.ErrInvalidArgument)
	}
	c := &conn{client: client, allLua: vk.NewLuaScript(lua.All.Text), args: lua.NewStringArgs()}
	for alg := range c.ones {
		c.ones[alg] = vk.NewLuaScript(lua.For(backend.Algorithm(alg)).Text)
	}
	for _, o := range opts {
		o(c)
	}
	if c.ackReplicas < 0 || (c.ackReplicas > 0 && c.ackTimeout < time.Millisecond) {
		return nil, fmt.Errorf("%s: %w: WithReplicaAck(%d, %v): want at least 1 replica and 1ms",
			name, backend.ErrInvalidArgument, c.ackReplicas, c.ackTimeout)
	}
	oneServer := client.Mode() != vk.ClientModeCluster
	return &Store{c: c, core: core{Name: name, Client: c, Acked: c.ackReplicas > 0, OneServer: oneServer}}, nil
}

// Info implements backend.Store: on a cluster client, its Node is the
// master of the key's slot (see node); its Changes are a subscription to
// the server's channel of changes (see changes).
func (s *Store) Info() backend.Info {
	info := backend.Info{Changes: s.changes, Blocks: true}
	if s.c.client.Mode() == vk.ClientModeCluster {
		info.Node = s.node
	}
	return info
}

// Run implements rediscore.Client: req's FCALL or EVALSHA.
func (c *conn) Run(ctx context.Context, req backend.Request, op lua.Op, fcall, acked bool) (string, error) {
	alg := req.Rule.Algorithm()
	var reply vk.ValkeyMessage
	var err error
	if acked {
		reply, err = c.execAcked(ctx, lua.For(alg), lua.Keys(req), c.args.For(req, op), req.Key)
	} else {
		script := c.ones[alg]
		if fcall {
			script = nil
		}
		reply, err = c.exec(ctx, script, int(alg), lua.Keys(req), c.args.For(req, op))
	}
	if err != nil {
		return "", err
	}
	return reply.ToString()
}

// RunAll implements rediscore.Client: the FCALL of All's function, or the
// EVALSHA of All.
func (c *conn) RunAll(ctx context.Context, reqs []backend.Request, keys []string, op lua.Op, now int64, fcall, acked bool) ([]int64, error) {
	var reply vk.ValkeyMessage
	var err error
	if acked {
		reply, err = c.execAcked(ctx, lua.All, keys, c.args.ForAllAt(reqs, op, now), reqs[0].Key)
	} else {
		script := c.allLua
		if fcall {
			script = nil
		}
		reply, err = c.exec(ctx, script, all, keys, c.args.ForAllAt(reqs, op, now))
	}
	if err != nil {
		return nil, err
	}
	return reply.AsIntSlice()
}

// Del implements rediscore.Client: one DEL.
func (c *conn) Del(ctx context.Context, keys []string, key string, acked bool) error {
	_, err := rediscore.Bounded(ctx, name, c.lastTimeout.Load() == 0, func(ctx context.Context) (struct{}, error) {
		if acked {
			return struct{}{}, c.deleteAcked(ctx, keys, key)
		}
		return struct{}{}, c.client.Do(ctx, c.client.B().Del().Key(keys...).Build()).Error()
	})
	return err
}

// core is the Redis-protocol engine, embedded: its methods are Store's.
type core = rediscore.Store

// Time implements rediscore.Client: TIME, on any node of a cluster.
func (c *conn) Time(ctx context.Context) (time.Time, error) {
	return rediscore.Bounded(ctx, name, c.lastTimeout.Load() == 0, func(ctx context.Context) (time.Time, error) {
		words, err := c.client.Do(ctx, c.client.B().Time().Build()).AsIntSlice()
		if err != nil {
			return time.Time{}, err
		}
		if len(words) != 2 {
			return time.Time{}, fmt.Errorf("TIME answered %d numbers, not 2: %w", len(words), backend.ErrStore)
		}
		return time.Unix(words[0], words[1]*1000), nil
	})
}
