package main

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/internal/script"
	"github.com/ratelimit-go/ratelimit/internal/testserver"
)

func BenchmarkBareEvalSha(b *testing.B) {
	srv := testserver.Get(b, testserver.Redis)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, PoolSize: 64, ContextTimeoutEnabled: true})
	defer c.Close()
	sc := goredis.NewScript(script.Fixed)
	ctx := context.Background()
	sc.Load(ctx, c)
	keys := make([][]string, 1000)
	for i := range keys {
		keys[i] = []string{"bare:{" + strconv.Itoa(i) + "}:fw"}
	}
	var next atomic.Int64
	b.SetParallelism(32)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := sc.EvalSha(ctx, c, keys[next.Add(1)%1000], "100", "1000000", "1", "", "1000").Err(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
