package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
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
// reporting allocations. Options change the goroutine counts, the budget,
// the algorithms and the share of failed calls that fails the benchmark.
// Call it from a benchmark of your own:
//
//	func BenchmarkStore(b *testing.B) { conformance.Benchmark(b, mystore.New(client)) }
//	func BenchmarkStoreLoaded(b *testing.B) {
//		conformance.Benchmark(b, mystore.New(client), conformance.Goroutines(256), conformance.Budget(time.Second))
//	}
//
// Each sub-benchmark reports, beside ns/op: decisions/s; p50-ns and p99-ns,
// the latency of one call in 16 (the last 1,024 such per goroutine); timeouts (calls that missed the budget)
// and errors (the other failed calls). It fails on a wrong answer (a
// Decision whose Count, Remaining or RetryAfter contradict each other or
// the limit), and on failed calls only past MaxFailures' share: a loaded
// machine misses a short budget now and then, and the figures still say
// how the store did.
func Benchmark(b *testing.B, store backend.Store, opts ...BenchmarkOption) {
	c := benchConfig{goroutines: []int{1, 64}, budget: ratelimit.DefaultTimeout, algorithms: backend.Algorithms(), maxFailures: 1}
	for _, o := range opts {
		o(&c)
	}
	for _, alg := range c.algorithms {
		for _, par := range c.goroutines {
			b.Run(alg.String()+"/parallel-"+strconv.Itoa(par), func(b *testing.B) {
				l, err := ratelimit.New(store, ratelimit.NewPolicy(alg, 100, time.Second), ratelimit.WithTimeout(c.budget),
					ratelimit.WithPrefix("bench:"+strconv.FormatInt(time.Now().UnixNano(), 36)+":"))
				if err != nil {
					b.Fatal(err)
				}
				if err := benchAllow(b, l, par, c.maxFailures); err != nil {
					b.Error(err)
				}
			})
		}
	}
}

// benchAllow runs b.N calls of l.Allow from par goroutines over 1,000 keys,
// reports what Benchmark says, and returns what fails it.
func benchAllow(b *testing.B, l *ratelimit.Limiter, par int, maxFailures float64) error {
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	ctx := context.Background()
	var (
		next             atomic.Int64
		timeouts, failed atomic.Int64
		firstTimeout     atomic.Pointer[string]
		firstFailure     atomic.Pointer[string]
		wrong            atomic.Pointer[string]
		mu               sync.Mutex
		latencies        []time.Duration
	)
	report := func(why string) { wrong.CompareAndSwap(nil, &why) }
	run := func(i int, n func() bool) {
		// The latencies of one call in 16, the last 1,024 of them: one
		// allocation per goroutine, whatever b.N.
		mine := make([]time.Duration, 0, 1024)
		for k := 0; n(); k++ {
			i++
			var start time.Time
			if k%16 == 0 {
				start = time.Now()
			}
			d, err := l.Allow(ctx, keys[i%len(keys)])
			if k%16 == 0 {
				if took := time.Since(start); len(mine) < cap(mine) {
					mine = append(mine, took)
				} else {
					mine[k/16%cap(mine)] = took
				}
			}
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				timeouts.Add(1)
				text := err.Error()
				firstTimeout.CompareAndSwap(nil, &text)
			case err != nil:
				failed.Add(1)
				text := err.Error()
				firstFailure.CompareAndSwap(nil, &text)
			default:
				if why := contradiction(d); why != "" {
					report(why)
				}
			}
		}
		mu.Lock()
		latencies = append(latencies, mine...)
		mu.Unlock()
	}
	b.SetParallelism(max(1, par/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	if par <= 1 {
		n := 0
		run(0, func() bool { n++; return n <= b.N })
	} else {
		b.RunParallel(func(pb *testing.PB) {
			// Each goroutine walks the keys from its own offset: a shared
			// counter per call would measure its cache line.
			run(int(next.Add(97)), pb.Next)
		})
	}
	b.StopTimer()
	if b.N > 0 && b.Elapsed() > 0 {
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	}
	if len(latencies) > 0 {
		slices.Sort(latencies)
		b.ReportMetric(float64(latencies[len(latencies)/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(latencies[len(latencies)*99/100].Nanoseconds()), "p99-ns")
	}
	b.ReportMetric(float64(timeouts.Load()), "timeouts")
	b.ReportMetric(float64(failed.Load()), "errors")
	if why := wrong.Load(); why != nil {
		return fmt.Errorf("a wrong answer: %s", *why)
	}
	if misses := timeouts.Load() + failed.Load(); b.N > 0 && float64(misses) > maxFailures*float64(b.N) {
		return fmt.Errorf("%d of %d calls failed (%d timeouts), over MaxFailures(%v); the first timeout: %s; the first other failure: %s "+
			"(a store whose budget ran out returns an error wrapping context.DeadlineExceeded: counted as a timeout)",
			misses, b.N, timeouts.Load(), maxFailures, orNone(firstTimeout.Load()), orNone(firstFailure.Load()))
	}
	return nil
}

// orNone is *s, or "none".
func orNone(s *string) string {
	if s == nil {
		return "none"
	}
	return *s
}

// contradiction is what is wrong with d, a decision of the store's, or "".
func contradiction(d ratelimit.Decision) string {
	switch {
	case d.Source != ratelimit.SourceStore:
		return "" // a fallback's or a failure mode's, which says so
	case d.Count < 0 || d.Count > d.Limit:
		return fmt.Sprintf("Count %d outside [0, Limit %d]", d.Count, d.Limit)
	case d.Remaining != d.Limit-d.Count:
		return fmt.Sprintf("Remaining %d, not Limit %d less Count %d", d.Remaining, d.Limit, d.Count)
	case d.Allowed != (d.RetryAfter == 0):
		return fmt.Sprintf("Allowed %v with RetryAfter %v", d.Allowed, d.RetryAfter)
	}
	return ""
}

// BenchmarkOption changes what Benchmark measures.
type BenchmarkOption func(*benchConfig)

type benchConfig struct {
	goroutines  []int
	budget      time.Duration
	algorithms  []backend.Algorithm
	maxFailures float64
}

// Goroutines sets the numbers of goroutines Benchmark measures from, each a
// sub-benchmark (default 1 and 64).
func Goroutines(n ...int) BenchmarkOption { return func(c *benchConfig) { c.goroutines = n } }

// Budget sets the Limiter's time budget (ratelimit.WithTimeout; default
// ratelimit.DefaultTimeout). A call that misses it is counted (timeouts).
func Budget(d time.Duration) BenchmarkOption { return func(c *benchConfig) { c.budget = d } }

// MaxFailures sets the share of calls in [0, 1] that may fail (a timeout, an
// error) before a sub-benchmark fails; by default none fails it: the
// figures report them.
func MaxFailures(share float64) BenchmarkOption {
	return func(c *benchConfig) { c.maxFailures = share }
}

// Algorithms sets the algorithms measured (default all), for a store that
// supports only some.
func Algorithms(algs ...backend.Algorithm) BenchmarkOption {
	return func(c *benchConfig) { c.algorithms = algs }
}
