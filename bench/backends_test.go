package main

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/backend/redis"
	"github.com/ratelimit-go/ratelimit/backend/valkey"
	"github.com/ratelimit-go/ratelimit/internal/testserver"
)

func TestMain(m *testing.M) { testserver.Main(m) }

var algorithms = []ratelimit.Algorithm{ratelimit.SlidingWindow, ratelimit.FixedWindow}

// benchStore measures Allow on a store, for each algorithm, from 1 goroutine
// and from 64, over 1,000 keys at 100 requests per second each.
func benchStore(b *testing.B, store ratelimit.Store) {
	for _, alg := range algorithms {
		for _, par := range []int{1, 64} {
			b.Run(alg.String()+"/parallel-"+strconv.Itoa(par), func(b *testing.B) {
				l, err := ratelimit.New(store, ratelimit.Policy{Limit: 100, Window: time.Second, Algorithm: alg},
					ratelimit.WithPrefix("bench:"+strconv.FormatInt(time.Now().UnixNano(), 36)+":"))
				if err != nil {
					b.Fatal(err)
				}
				keys := make([]string, 1000)
				for i := range keys {
					keys[i] = "user-" + strconv.Itoa(i)
				}
				ctx := context.Background()
				var next atomic.Int64
				b.SetParallelism(max(1, par/runtime.GOMAXPROCS(0)))
				b.ReportAllocs()
				b.ResetTimer()
				if par == 1 {
					for i := 0; i < b.N; i++ {
						if _, err := l.Allow(ctx, keys[i%len(keys)]); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				b.RunParallel(func(pb *testing.PB) {
					// Each goroutine walks the keys from its own offset: a
					// shared counter per call would measure its cache line.
					i := int(next.Add(97))
					for pb.Next() {
						i++
						if _, err := l.Allow(ctx, keys[i%len(keys)]); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

func BenchmarkMemory(b *testing.B) {
	s := memory.New()
	defer s.Close()
	benchStore(b, s)
}

func BenchmarkRedis(b *testing.B) {
	srv := testserver.Get(b, testserver.Redis)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, PoolSize: 64, ContextTimeoutEnabled: true})
	defer c.Close()
	benchStore(b, redis.New(c))
}

func BenchmarkValkey(b *testing.B) {
	srv := testserver.Get(b, testserver.Valkey)
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true, MaxFlushDelay: valkeyFlushDelay})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	benchStore(b, valkey.New(c))
}
