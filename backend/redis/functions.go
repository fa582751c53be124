package redis

import (
	"context"
	"errors"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/script"
)

// Functions: a request's decision is an FCALL of its algorithm's function
// (script.Library, loaded on the first "Function not found") where the
// server has functions (Redis 7, Valkey), else the EVALSHA of the same
// script (script.Store decides which). Both take the same keys and
// arguments, so only the first two words of the command differ.

// The words naming each algorithm's function, boxed once.
var (
	fcallWord any = "fcall"
	functions     = func() (b [4]any) {
		for alg := range b {
			b[alg] = script.Function(backend.Algorithm(alg))
		}
		return b
	}()
)

// LoadLibrary implements script.Client: FUNCTION LOAD on the server that
// decides req's key, a cluster's master of its slot, else the client's
// server.
func (c *conn) LoadLibrary(ctx context.Context, req backend.Request) (refused bool, err error) {
	ctx, cancel := c.capped(ctx)
	defer cancel()
	_, err = script.Bounded(ctx, name, c.honoursContext, func(ctx context.Context) (struct{}, error) {
		if c.masterFor != nil {
			master, err := c.masterFor(ctx, script.Tag(req.Key))
			if err != nil {
				return struct{}{}, err
			}
			return struct{}{}, master.FunctionLoad(ctx, script.Library).Err()
		}
		return struct{}{}, c.client.Process(ctx, goredis.NewStringCmd(ctx, "function", "load", script.Library))
	})
	if script.LibraryLoaded(err) {
		return false, nil
	}
	var answer goredis.Error
	return errors.As(err, &answer), err
}
