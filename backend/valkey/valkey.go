// Package valkey is the ratelimit.Store on Valkey (or Redis), through
// github.com/valkey-io/valkey-go.
//
// It runs the same Lua scripts as the Redis backend, with the same key names
// and the same server clock, so a key written through one backend reads the
// same through the other. Each decision is one EVALSHA (valkey-go falls back
// to EVAL on NOSCRIPT); valkey-go pipelines the commands of concurrent
// callers on shared connections automatically, which is where this backend
// gets its throughput under load. Reset is one DEL.
//
// valkey-go honours the context's deadline. A call that timed out may still
// have been decided on the server. See package ratelimit for the clock
// options and backend/redis for the key layout.
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
	client  vk.Client
	sliding *vk.Lua
	fixed   *vk.Lua
	args    *script.ArgCache[string]
}

// New returns a Store deciding on client's server (standalone, sentinel or
// cluster).
func New(client vk.Client) *Store {
	return &Store{
		client:  client,
		sliding: vk.NewLuaScript(script.Sliding),
		fixed:   vk.NewLuaScript(script.Fixed),
		args:    script.NewStringArgs(),
	}
}

// Take implements ratelimit.Store: one EVALSHA.
func (s *Store) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	sc := s.sliding
	if req.Policy.Algorithm == ratelimit.FixedWindow {
		sc = s.fixed
	}
	reply, err := sc.Exec(ctx, s.client, script.Keys(req), s.args.For(req)).AsIntSlice()
	if err != nil {
		return ratelimit.Decision{}, fmt.Errorf("ratelimit/valkey: %w", err)
	}
	d, err := script.Decision(reply, req.Policy.Limit)
	if err != nil {
		return ratelimit.Decision{}, fmt.Errorf("ratelimit/valkey: %w", err)
	}
	return d, nil
}

// Reset implements ratelimit.Store: one DEL of the key's state.
func (s *Store) Reset(ctx context.Context, req ratelimit.Request) error {
	err := s.client.Do(ctx, s.client.B().Del().Key(script.Keys(req)...).Build()).Error()
	if err != nil {
		return fmt.Errorf("ratelimit/valkey: %w", err)
	}
	return nil
}
