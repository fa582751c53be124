package main

import (
	"context"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/guard"
)

// BenchmarkBreaker is what a circuit breaker adds to a store call while
// closed, the hot path: the memory store alone, the same store guarded by
// package guard (an atomic load before the call and one after), and behind
// github.com/sony/gobreaker's two-step breaker (a mutex, twice per call).
// It lives here, with the peers, so that the library's go.mod carries no
// module for a benchmark.
func BenchmarkBreaker(b *testing.B) {
	s, err := memory.New(memory.WithSweepInterval(0))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	rule, err := backend.NewRule(backend.GCRA, 1_000_000, time.Second, 1_000_000, time.Second, "breaker:")
	if err != nil {
		b.Fatal(err)
	}
	req := backend.Request{Rule: rule, Key: "k", Cost: 1}
	g, err := guard.New(s)
	if err != nil {
		b.Fatal(err)
	}
	cb := gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{MaxRequests: 1})
	for _, c := range []struct {
		name string
		take func(context.Context) error
	}{
		{"none", func(ctx context.Context) error { _, err := s.Take(ctx, req); return err }},
		{"guard", func(ctx context.Context) error { _, err := g.Take(ctx, req); return err }},
		{"gobreaker", func(ctx context.Context) error {
			done, err := cb.Allow()
			if err != nil {
				return err
			}
			_, err = s.Take(ctx, req)
			done(err)
			return err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := c.take(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
