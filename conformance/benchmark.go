package conformance

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// Benchmark measures Limiter.Allow on store the way this module's backends
// are measured, so that a new backend can compare itself with them: for each
// algorithm, from 1 goroutine and from 64 (b.RunParallel), over 1,000 keys at
// 100 requests per second each, reporting allocations. Call it from a
// benchmark of your own:
//
//	func BenchmarkStore(b *testing.B) { conformance.Benchmark(b, mystore.New(client)) }
func Benchmark(b *testing.B, store ratelimit.Store) {
	for _, alg := range ratelimit.Algorithms() {
		for _, par := range []int{1, 64} {
			b.Run(alg.String()+"/parallel-"+strconv.Itoa(par), func(b *testing.B) {
				l, err := ratelimit.New(store, ratelimit.NewPolicy(alg, 100, time.Second),
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
