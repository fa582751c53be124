package main

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// BenchmarkRedisBareEvalSha is the client's own cost: go-redis running the
// same scripts by EVALSHA with constant arguments, no limiter around them,
// from 64 goroutines. BenchmarkRedis/*/parallel-64 next to it shows what the
// backend adds.
func BenchmarkRedisBareEvalSha(b *testing.B) {
	srv := testserver.Get(b, testserver.Redis)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, PoolSize: 128, ContextTimeoutEnabled: true})
	defer c.Close()
	ctx := context.Background()
	for _, alg := range backend.Algorithms() {
		b.Run(alg.String(), func(b *testing.B) {
			sc := goredis.NewScript(lua.For(alg).Text)
			if err := sc.Load(ctx, c).Err(); err != nil {
				b.Fatal(err)
			}
			// The arguments of a decision under 100 per second, formatted once.
			policy := ratelimit.NewPolicy(alg, 100, time.Second)
			var args []any
			for _, a := range lua.Args(request("bare:", "0", policy), lua.Take) {
				args = append(args, a)
			}
			keys := make([][]string, 1000)
			for i := range keys {
				keys[i] = lua.Keys(request("bare:", strconv.Itoa(i), policy))
			}
			var next atomic.Int64
			b.SetParallelism(32)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(97))
				for pb.Next() {
					i++
					if err := sc.EvalSha(ctx, c, keys[i%len(keys)], args...).Err(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
