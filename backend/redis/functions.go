package redis

import (
	"context"
	"errors"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/rediscore"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
)

// Functions: a request's decision is an FCALL of its algorithm's function
// (lua.Library, loaded on the first "Function not found") where the
// server has functions (Redis 7, Valkey), else the EVALSHA of the same
// script (rediscore.Store decides which). Both take the same keys and
// arguments, so only the first two words of the command differ.

// The words naming each algorithm's function and All's, boxed once.
var (
	fcallWord any = "fcall"
	functions     = func() (b [lua.Algorithms]any) {
		for alg := range b {
			b[alg] = lua.Function(backend.Algorithm(alg))
		}
		return b
	}()
	allFunction any = lua.AllFunction()
)

// LoadLibrary implements rediscore.Client: FUNCTION LOAD on the server that
// decides req's key, a cluster's master of its slot, else the client's
// server.
func (c *conn) LoadLibrary(ctx context.Context, req backend.Request) (refused bool, err error) {
	ctx, cancel := c.capped(ctx)
	defer cancel()
	_, err = rediscore.Bounded(ctx, name, c.honoursContext, func(ctx context.Context) (struct{}, error) {
		if c.masterFor != nil {
			master, err := c.masterFor(ctx, lua.Tag(req.Key))
			if err != nil {
				return struct{}{}, err
			}
			return struct{}{}, master.FunctionLoad(ctx, lua.Library).Err()
		}
		return struct{}{}, c.client.Process(ctx, goredis.NewStringCmd(ctx, "function", "load", lua.Library))
	})
	if lua.LibraryLoaded(err) {
		return false, nil
	}
	var answer goredis.Error
	return errors.As(err, &answer), err
}
