package guard

import (
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/conformance"
)

// BenchmarkBreaker measures what the breaker adds to a call while closed,
// the hot path (an atomic load before the call and one after).
// bench/peers' BenchmarkBreaker sets it beside github.com/sony/gobreaker's,
// and ./bench's BenchmarkValkeyGuarded in front of a network store.
func BenchmarkBreaker(b *testing.B) {
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
