package conformance

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
)

// Benchmark measures Limiter.Allow on store the way this module's backends
// are measured, so that a new backend can compare itself with them: for each
// algorithm, from 1 goroutine and from 64 (b.RunParallel), over 1,000 keys at
// 100 requests per second each, with the Limiter's default time budget,
// reporting allocations. Options change the goroutine counts, the budget
// and the algorithms. Call it from a benchmark of your own:
//
//	func BenchmarkStore(b *testing.B) { conformance.Benchmark(b, mystore.New(client)) }
//	func BenchmarkStoreLoaded(b *testing.B) {
//		conformance.Benchmark(b, mystore.New(client), conformance.Goroutines(256), conformance.Budget(time.Second))
//	}
func Benchmark(b *testing.B, store backend.Store, opts ...BenchmarkOption) {
	c := benchConfig{goroutines: []int{1, 64}, budget: ratelimit.DefaultTimeout, algorithms: backend.Algorithms()}
	for _, o := range opts {
		o(&c)
	}
	for _, alg := range c.algorithms {
		for _, par := range c.goroutines {
			b.Run(alg.String()+"/parallel-"+strconv.Itoa(par), func(b *testing.B) {
				l, err := ratelimit.New(store, ratelimit.NewPolicy(ratelimit.Algorithm(alg), 100, time.Second), ratelimit.WithTimeout(c.budget),
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
				if par <= 1 {
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

// BenchmarkOption changes what Benchmark measures.
type BenchmarkOption func(*benchConfig)

type benchConfig struct {
	goroutines []int
	budget     time.Duration
	algorithms []backend.Algorithm
}

// Goroutines sets the numbers of goroutines Benchmark measures from, each a
// sub-benchmark (default 1 and 64).
func Goroutines(n ...int) BenchmarkOption { return func(c *benchConfig) { c.goroutines = n } }

// Budget sets the Limiter's time budget (ratelimit.WithTimeout; default
// ratelimit.DefaultTimeout). A call that misses it fails the benchmark.
func Budget(d time.Duration) BenchmarkOption { return func(c *benchConfig) { c.budget = d } }

// Algorithms sets the algorithms measured (default all), for a store that
// supports only some.
func Algorithms(algs ...backend.Algorithm) BenchmarkOption {
	return func(c *benchConfig) { c.algorithms = algs }
}
