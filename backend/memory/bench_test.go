package memory_test

import (
	"context"
	"runtime"
	"strconv"
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

// BenchmarkAdmitManyKeys is bench/peers' admitting cell on a manual clock,
// so that what each key holds does not follow the machine's speed: 1,000
// keys in turn, each at 10,000 per 10ms, the clock stepping 80ns a call,
// so that a sliding log holds 125 entries a key, 125,000 in all (more than
// a core's caches), and every call prunes the oldest and admits one.
func BenchmarkAdmitManyKeys(b *testing.B) {
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "key" + strconv.Itoa(i)
	}
	for _, alg := range backend.Algorithms() {
		b.Run(alg.String(), func(b *testing.B) {
			s, err := memory.New()
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			now := time.Now()
			l, err := ratelimit.New(s, ratelimit.NewPolicy(alg, 10_000, 10*time.Millisecond), ratelimit.WithCallerClock(func() time.Time {
				now = now.Add(80 * time.Nanosecond)
				return now
			}))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for i := range 125 * len(keys) { // the logs filled
				_, _ = l.Allow(ctx, keys[i%len(keys)])
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				d, err := l.Allow(ctx, keys[i%len(keys)])
				if err != nil || !d.Allowed {
					b.Fatal(d, err)
				}
			}
		})
	}
}

// BenchmarkLogBytes reports the heap a memory store's sliding logs take a
// request in the window (B/entry): 1,000 keys holding 1,000 requests each,
// of cost 1 and of cost 2, everything the store holds counted (the keys'
// records, their buffers' spare room).
func BenchmarkLogBytes(b *testing.B) {
	for _, cost := range []int{1, 2} {
		b.Run("cost-"+strconv.Itoa(cost), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.ReportMetric(logBytes(b, cost), "B/entry")
			}
		})
	}
}

func logBytes(b *testing.B, cost int) float64 {
	const keys, each = 1000, 1000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, err := memory.New()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	l, err := ratelimit.New(s, ratelimit.NewPolicy(backend.SlidingWindow, 2*each, time.Hour), ratelimit.WithCallerClock(func() time.Time {
		now = now.Add(time.Microsecond)
		return now
	}))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := range keys * each {
		if d, err := l.AllowN(ctx, "key"+strconv.Itoa(i%keys), cost); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	return float64(after.HeapAlloc-before.HeapAlloc) / (keys * each)
}
