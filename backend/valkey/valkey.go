// Package valkey is the backend.Store on Valkey (or Redis), through
// github.com/valkey-io/valkey-go.
//
// It runs the same Lua scripts as the Redis backend, with the same key names
// and the same server clock, so a key written through one backend reads the
// same through the other. Each decision is one FCALL of the function of
// its algorithm (the store loads the library on the first "Function not
// found"), or on a server without functions (or whose ACL forbids them)
// one EVALSHA (valkey-go falls back to EVAL on NOSCRIPT); valkey-go
// pipelines the commands of concurrent callers on shared connections
// automatically, which is where this backend gets its throughput under
// load. Reset is one DEL. The Store is a
// backend.MultiStore: several policies on one caller's key are decided by
// one script.
//
// valkey-go honours the context's deadline, but for one case that the store
// covers itself (see exec). A call that timed out may still have been decided
// on the server. A panic of the client is returned as an
// error wrapping backend.ErrStore. See package ratelimit for the clock
// options and internal/script/keys.go for the key layout.
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
	"github.com/ratelimit-go/ratelimit/internal/script"
)

// Store is the Valkey backend.Store. It holds no state of its own and does
// not own the client: close the client when done.
type Store struct {
	client vk.Client
	// ones are the scripts of one request by algorithm, allLua the one of
	// TakeAll (script.For, script.All).
	ones   [4]*vk.Lua
	allLua *vk.Lua
	args   *script.ArgCache[string]
	// lastTimeout is when a call last timed out (Unix ns), 0 for never:
	// for boundFor after it, calls are bounded by the store (see exec).
	lastTimeout atomic.Int64
	nodes       nodes // a cluster's layout (see Node)
	// ackReplicas, if not 0, is how many replicas must acknowledge every
	// write within ackTimeout (WithReplicaAck).
	ackReplicas int
	ackTimeout  time.Duration
	// noFunctions: the server has no functions, or the client cannot load
	// them where it calls them; the store runs EVALSHA (see functions.go).
	noFunctions atomic.Bool
}

// boundFor is how long after a timeout the store bounds its calls itself.
const boundFor = 10 * time.Second

// exec runs the script. valkey-go honours the context's deadline, except
// when a connection's ring of commands awaiting replies is full: a caller
// then waits for a slot without looking at its context (rueidis issue 858).
// The ring fills only with commands abandoned at their deadline, so for a
// while after a timeout the store bounds each call itself (a goroutine per
// call); a healthy store pays one atomic load.
// execBounded runs the script on a goroutine of its own, returning when ctx
// is done. It works on copies of keys and args, so that the healthy path's
// stay on the stack.
func (s *Store) execBounded(ctx context.Context, lua *vk.Lua, alg int, keys, args []string) ([]int64, error) {
	keys, args = slices.Clone(keys), slices.Clone(args)
	return script.Bounded(ctx, "ratelimit/valkey", false, func(ctx context.Context) ([]int64, error) {
		return s.call(ctx, lua, alg, keys, args)
	})
}

// exec runs the script lua of alg (-1: All) on keys with args (see call).
func (s *Store) exec(ctx context.Context, lua *vk.Lua, alg int, keys, args []string) ([]int64, error) {
	var reply []int64
	var err error
	if last := s.lastTimeout.Load(); last == 0 || time.Since(time.Unix(0, last)) >= boundFor {
		reply, err = s.call(ctx, lua, alg, keys, args) // the healthy path: no closure
	} else {
		reply, err = s.execBounded(ctx, lua, alg, keys, args)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		s.lastTimeout.Store(time.Now().UnixNano())
	}
	return reply, err
}

// New returns a Store deciding on client's server (standalone, sentinel or
// cluster). A nil client, or an option out of its bounds (WithReplicaAck),
// is an error wrapping backend.ErrInvalidArgument.
func New(client vk.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("ratelimit/valkey: %w: nil client", backend.ErrInvalidArgument)
	}
	s := &Store{
		client: client,
		allLua: vk.NewLuaScript(script.All.Text),
	}
	for alg := range s.ones {
		s.ones[alg] = vk.NewLuaScript(script.For(backend.Algorithm(alg)).Text)
	}
	for _, o := range opts {
		o(s)
	}
	if s.ackReplicas < 0 || (s.ackReplicas > 0 && s.ackTimeout < time.Millisecond) {
		return nil, fmt.Errorf("ratelimit/valkey: %w: WithReplicaAck(%d, %v): want at least 1 replica and 1ms",
			backend.ErrInvalidArgument, s.ackReplicas, s.ackTimeout)
	}
	s.args = script.NewStringArgs()
	return s, nil
}

// Take implements backend.Store: one FCALL (or EVALSHA).
func (s *Store) Take(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.decide(ctx, req, script.Take)
}

// Peek implements backend.Store: one FCALL (or EVALSHA) that writes nothing.
func (s *Store) Peek(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.decide(ctx, req, script.Peek)
}

// Refund implements backend.RefundStore: one FCALL (or EVALSHA), then a PUBLISH on
// the channel of changes (see Invalidations).
func (s *Store) Refund(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	out, err := s.decide(ctx, req, script.Refund)
	if err == nil {
		s.changedKey(ctx, req.Rule.Prefix(), req.Key)
	}
	return out, err
}

func (s *Store) decide(ctx context.Context, req backend.Request, op script.Op) (out backend.Outcome, err error) {
	defer script.Recover("ratelimit/valkey", &err)
	if err := req.Validate(); err != nil {
		return backend.Outcome{}, fmt.Errorf("ratelimit/valkey: %w", err)
	}
	var reply []int64
	if s.ackReplicas > 0 && op != script.Peek {
		reply, err = s.execAcked(ctx, script.For(req.Rule.Algorithm()), script.Keys(req), s.args.For(req, op), req.Key)
	} else {
		reply, err = s.exec(ctx, s.ones[req.Rule.Algorithm()], int(req.Rule.Algorithm()), script.Keys(req), s.args.For(req, op))
	}
	if err == nil {
		out, err = script.Outcome(reply)
	}
	if err != nil {
		return backend.Outcome{}, fmt.Errorf("ratelimit/valkey: %w", script.WithContext(ctx, err))
	}
	return out, nil
}

// TakeAll implements backend.MultiStore: one request by its own script or
// function, as Take but for a denial, which writes nothing (a Multi of one
// policy: httplimit's, ratelimitd's one descriptor); several by one EVALSHA
// for every request, whatever their keys, on a single server; on a cluster client, one for
// requests on one caller's key (one hash tag), and for keys of several tags
// a script per tag, sent at once, in two steps (script.TakeApart: a peek,
// then a take if every one would admit), or, with WithReplicaAck, a refusal
// (errors.ErrUnsupported).
func (s *Store) TakeAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) (err error) {
	defer script.Recover("ratelimit/valkey", &err)
	if len(reqs) == 1 && len(outs) == 1 { // Multi of one policy: its own script (or function)
		outs[0], err = s.decide(ctx, reqs[0], script.TakeQuiet)
		return err
	}
	if err := script.TakeAll(ctx, reqs, outs, s.client.Mode() != vk.ClientModeCluster, s.ackReplicas == 0, s.all); err != nil {
		return fmt.Errorf("ratelimit/valkey: %w", err)
	}
	return nil
}

// all runs the script of several requests on keys, with op, into outs.
func (s *Store) all(ctx context.Context, reqs []backend.Request, keys []string, op script.Op, outs []backend.Outcome) error {
	var reply []int64
	var err error
	if s.ackReplicas > 0 && op != script.Peek {
		reply, err = s.execAcked(ctx, script.All, keys, s.args.ForAllOp(reqs, op), reqs[0].Key)
	} else {
		reply, err = s.exec(ctx, s.allLua, -1, keys, s.args.ForAllOp(reqs, op))
	}
	if err != nil {
		return err
	}
	return script.Outcomes(reply, outs)
}

// Reset implements backend.Store: one DEL of the key's state under every
// algorithm, then a PUBLISH on the channel of changes (see Invalidations).
func (s *Store) Reset(ctx context.Context, prefix, key string) (err error) {
	defer script.Recover("ratelimit/valkey", &err)
	_, err = script.Bounded(ctx, "ratelimit/valkey", s.lastTimeout.Load() == 0, func(ctx context.Context) (struct{}, error) {
		if s.ackReplicas > 0 {
			return struct{}{}, s.deleteAcked(ctx, script.AllKeys(prefix, key), key)
		}
		return struct{}{}, s.client.Do(ctx, s.client.B().Del().Key(script.AllKeys(prefix, key)...).Build()).Error()
	})
	if err != nil {
		return fmt.Errorf("ratelimit/valkey: %w", err)
	}
	s.changedKey(ctx, prefix, key)
	return nil
}
