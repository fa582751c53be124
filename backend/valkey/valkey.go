// Package valkey is the ratelimit.Store on Valkey (or Redis), through
// github.com/valkey-io/valkey-go.
//
// It runs the same Lua scripts as the Redis backend, with the same key names
// and the same server clock, so a key written through one backend reads the
// same through the other. Each decision is one EVALSHA (valkey-go falls back
// to EVAL on NOSCRIPT); valkey-go pipelines the commands of concurrent
// callers on shared connections automatically, which is where this backend
// gets its throughput under load. Reset is one DEL. The Store is a
// ratelimit.MultiStore: several policies on one caller's key are decided by
// one script.
//
// valkey-go honours the context's deadline. A call that timed out may still
// have been decided on the server. A panic of the client is returned as an
// error wrapping ratelimit.ErrStore. See package ratelimit for the clock
// options and internal/script/keys.go for the key layout.
package valkey

import (
	"context"
	"fmt"

	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/script"
)

// Store is the Valkey ratelimit.Store. It holds no state of its own and does
// not own the client: close the client when done.
type Store struct {
	client vk.Client
	script *vk.Lua
	args   *script.ArgCache[string]
}

// New returns a Store deciding on client's server (standalone, sentinel or
// cluster).
func New(client vk.Client) *Store {
	return &Store{
		client: client,
		script: vk.NewLuaScript(script.Decide),
		args:   script.NewStringArgs(),
	}
}

// Take implements ratelimit.Store: one EVALSHA.
func (s *Store) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return s.decide(ctx, req, true)
}

// Peek implements ratelimit.Store: one EVALSHA that writes nothing.
func (s *Store) Peek(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return s.decide(ctx, req, false)
}

func (s *Store) decide(ctx context.Context, req ratelimit.Request, record bool) (d ratelimit.Decision, err error) {
	defer script.Recover("ratelimit/valkey", &err)
	reply, err := s.script.Exec(ctx, s.client, script.Keys(req), s.args.For(req, record)).AsIntSlice()
	if err == nil {
		d, err = script.Decision(reply, req.Policy.Limit)
	}
	if err != nil {
		return ratelimit.Decision{}, fmt.Errorf("ratelimit/valkey: %w", err)
	}
	return d, nil
}

// TakeAll implements ratelimit.MultiStore: one EVALSHA for requests on one
// caller's key (one hash tag); others are refused (errors.ErrUnsupported).
func (s *Store) TakeAll(ctx context.Context, reqs []ratelimit.Request) (ds []ratelimit.Decision, err error) {
	defer script.Recover("ratelimit/valkey", &err)
	keys, err := script.KeysAll(reqs)
	if err != nil {
		return nil, fmt.Errorf("ratelimit/valkey: %w", err)
	}
	reply, err := s.script.Exec(ctx, s.client, keys, s.args.ForAll(reqs)).AsIntSlice()
	if err == nil {
		ds, err = script.Decisions(reply, reqs)
	}
	if err != nil {
		return nil, fmt.Errorf("ratelimit/valkey: %w", err)
	}
	return ds, nil
}

// Reset implements ratelimit.Store: one DEL of the key's state under every
// algorithm.
func (s *Store) Reset(ctx context.Context, key ratelimit.Key) (err error) {
	defer script.Recover("ratelimit/valkey", &err)
	err = s.client.Do(ctx, s.client.B().Del().Key(script.AllKeys(key)...).Build()).Error()
	if err != nil {
		return fmt.Errorf("ratelimit/valkey: %w", err)
	}
	return nil
}
