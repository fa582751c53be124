package nearcache_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/nearcache"
)

// BenchmarkTakeAllCached measures a TakeAll of three requests whose
// denials are cached (a flood of ratelimitd's requests of three
// descriptors): with -cpu 1,2, what goroutines deciding at once cost each
// other.
func BenchmarkTakeAllCached(b *testing.B) {
	m, err := memory.New()
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	s, err := nearcache.New(m)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rule, err := backend.NewRule(backend.FixedWindow, 1, time.Hour, 0, time.Hour, "bench:")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	reqs := []backend.Request{{Rule: rule, Key: "user-1", Cost: 1}, {Rule: rule, Key: "user-2", Cost: 1}, {Rule: rule, Key: "user-3", Cost: 1}}
	outs := make([]backend.Outcome, len(reqs))
	for range 2 { // admitted, then denied and cached
		if err := s.TakeAll(ctx, reqs, outs); err != nil {
			b.Fatal(err)
		}
	}
	hits := s.Hits()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		outs := make([]backend.Outcome, len(reqs))
		for pb.Next() {
			if err := s.TakeAll(ctx, reqs, outs); err != nil {
				b.Error(err)
				return
			}
		}
	})
	if s.Hits()-hits < uint64(b.N) {
		b.Fatalf("%d of %d answered by the cache", s.Hits()-hits, b.N)
	}
}
