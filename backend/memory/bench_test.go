package memory

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// BenchmarkAllow measures Limiter.Allow on the memory store:
//   - store-clock: the store reads the clock; a warm key at 100/s, so most
//     calls are denials after the first 100 (the common case under abuse);
//   - admit: a manual clock steps 10ms per call under 100/s, so every call
//     prunes one entry and admits one (the most work a decision does);
//   - parallel-64: 64 goroutines over 1,000 keys on the store's clock.
func BenchmarkAllow(b *testing.B) {
	for _, alg := range []ratelimit.Algorithm{ratelimit.SlidingWindow, ratelimit.FixedWindow} {
		p := ratelimit.Policy{Limit: 100, Window: time.Second, Algorithm: alg}
		b.Run(alg.String()+"/store-clock", func(b *testing.B) {
			s := New()
			defer s.Close()
			l, _ := ratelimit.New(s, p)
			benchSerial(b, l)
		})
		b.Run(alg.String()+"/admit", func(b *testing.B) {
			s := New()
			defer s.Close()
			now := time.Now()
			l, _ := ratelimit.New(s, p, ratelimit.WithClock(func() time.Time {
				now = now.Add(10 * time.Millisecond)
				return now
			}))
			benchSerial(b, l)
		})
		b.Run(alg.String()+"/parallel-64", func(b *testing.B) {
			s := New()
			defer s.Close()
			l, _ := ratelimit.New(s, p)
			keys := make([]string, 1000)
			for i := range keys {
				keys[i] = "user-" + strconv.Itoa(i)
			}
			var next atomic.Int64
			ctx := context.Background()
			b.ReportAllocs()
			b.SetParallelism(64 / max(1, runtimeProcs()))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(1))
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

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
