package guard

import (
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/conformance"
)

// BenchmarkBreaker measures what the breaker adds to a call while closed,
// the hot path: github.com/sony/gobreaker's two-step breaker (a mutex, twice
// per call), and this package's (an atomic load before the call and one
// after). ./bench's BenchmarkValkeyGuarded shows the difference in front of
// a network store.
func BenchmarkBreaker(b *testing.B) {
	b.Run("gobreaker", func(b *testing.B) {
		cb := gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{MaxRequests: 1})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				done, err := cb.Allow()
				if err != nil {
					b.Error(err)
					return
				}
				done(nil)
			}
		})
	})
	b.Run("this package's", func(b *testing.B) {
		br := &breaker{threshold: 5, coolDown: time.Second}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				ok, probe := br.allow()
				if !ok {
					b.Error("open")
					return
				}
				br.done(probe, success)
			}
		})
	})
}

// BenchmarkGuardedStore is conformance.Benchmark on a guard over the memory
// store, to compare with the memory store alone (BenchmarkPlainStore).
func BenchmarkGuardedStore(b *testing.B) {
	s, err := New(benchMemory(b), WithFallback(benchMemory(b), 2))
	if err != nil {
		b.Fatal(err)
	}
	conformance.Benchmark(b, s)
}

// BenchmarkPlainStore is conformance.Benchmark on the memory store alone.
func BenchmarkPlainStore(b *testing.B) { conformance.Benchmark(b, benchMemory(b)) }

func benchMemory(b *testing.B) *memory.Store {
	s, err := memory.New(memory.WithSweepInterval(0))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}
