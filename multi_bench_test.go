package ratelimit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
)

// BenchmarkMultiAllow is a Multi decision over n policies of one memory
// store (one TakeAll), its keys over their limits: what a Multi adds to
// the store's decisions, for profiles.
func BenchmarkMultiAllow(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run("policies="+strconv.Itoa(n), func(b *testing.B) {
			s, err := memory.New()
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			limiters := make([]*ratelimit.Limiter, n)
			keys := make([]string, n)
			for i := range limiters {
				if limiters[i], err = ratelimit.New(s, ratelimit.NewPolicy(ratelimit.FixedWindow, 1, time.Hour), ratelimit.WithPrefix(strconv.Itoa(i)+":")); err != nil {
					b.Fatal(err)
				}
				keys[i] = "user"
			}
			m, err := ratelimit.NewMulti(limiters...)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if _, err := m.Allow(ctx, keys...); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for range b.N {
				if d, err := m.Allow(ctx, keys...); err != nil || d.Allowed {
					b.Fatal(d, err)
				}
			}
		})
	}
}
