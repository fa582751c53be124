package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
)

// BenchmarkAllow measures Limiter.Allow on the memory store:
//   - store-clock: the store reads the clock; a warm key at 100/s, so most
//     calls are denials after the first 100 (the common case under abuse);
//   - admit: a manual clock steps 10ms per call under 100/s, so every call
//     prunes one entry and admits one (the most work a decision does).
//
// BenchmarkMemory in ./bench measures 1 and 64 goroutines over 1,000 keys,
// side by side with the other backends.
func BenchmarkAllow(b *testing.B) {
	for _, alg := range backend.Algorithms() {
		p := ratelimit.NewPolicy(alg, 100, time.Second)
		b.Run(alg.String()+"/store-clock", func(b *testing.B) {
			s, err := memory.New()
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			l, _ := ratelimit.New(s, p)
			benchSerial(b, l)
		})
		b.Run(alg.String()+"/admit", func(b *testing.B) {
			s, err := memory.New()
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			now := time.Now()
			l, _ := ratelimit.New(s, p, ratelimit.WithCallerClock(func() time.Time {
				now = now.Add(10 * time.Millisecond)
				return now
			}))
			benchSerial(b, l)
		})
	}
}

func benchSerial(b *testing.B, l *ratelimit.Limiter) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := l.Allow(ctx, "warm"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLayers measures a decision on one warm key (GCRA, mostly
// denials) by the store alone, through backend.Store, and through a
// Limiter: the difference is the Limiter's cost (docs/figures.md).
func BenchmarkLayers(b *testing.B) {
	ctx := context.Background()
	s, err := memory.New()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rule, err := backend.NewRule(backend.GCRA, 100, time.Second, 100, time.Second, "store:")
	if err != nil {
		b.Fatal(err)
	}
	var store backend.Store = s
	b.Run("store", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := store.Take(ctx, backend.Request{Rule: rule, Key: "warm", Cost: 1}); err != nil {
				b.Fatal(err)
			}
		}
	})
	l, err := ratelimit.New(s, ratelimit.TokenBucket(100, time.Second, 100), ratelimit.WithPrefix("limiter:"))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("limiter", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := l.Allow(ctx, "warm"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
