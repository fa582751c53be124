package service

import (
	"context"
	"fmt"
	"testing"

	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
	"github.com/ratelimit-go/ratelimit/nearcache"
)

// benchDecide measures Decide of n descriptors, each under a rule of its
// own and over its limit, cycling over 1,000 values: the near cache (over a
// memory store) answers every one, as it answers the bench's steady load
// (cmd/ratelimitd/bench). For profiles of the service's own share:
//
//	go test ./cmd/ratelimitd/internal/service -run - -bench Decide -cpuprofile cpu.out
func benchDecide(b *testing.B, n int) {
	cfg, err := config.Parse("rules.yaml", []byte(oneRuleEach(n)))
	if err != nil {
		b.Fatal(err)
	}
	m, err := memory.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	nc, err := nearcache.New(m)
	if err != nil {
		b.Fatal(err)
	}
	svc, err := New(nc, cfg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]Request, 1000)
	for v := range reqs {
		reqs[v] = eachRule(n, fmt.Sprint("v", v))
	}
	ctx := context.Background()
	for range 2 { // every key over its limit, its denial cached
		for _, r := range reqs {
			if _, err := svc.Decide(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
	}
	hits := nc.Hits()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if res, err := svc.Decide(ctx, reqs[i%len(reqs)]); err != nil || !res.OverLimit {
			b.Fatal(res, err)
		}
		i++
	}
	b.ReportMetric(float64(nc.Hits()-hits)/float64(i), "cached/op")
}

func BenchmarkDecideCachedDenials(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("descriptors=%d", n), func(b *testing.B) { benchDecide(b, n) })
	}
}
