package main

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/testserver"
)

func TestMain(m *testing.M) { testserver.Main(m) }

// BenchmarkMemory is the memory scenarios of the command as Go benchmarks,
// for benchstat and profiles:
//
//	go test ./bench/peers -run - -bench 'Memory/denying-1/' -cpuprofile cpu.out
func BenchmarkMemory(b *testing.B) {
	for _, sc := range scenarios(64) {
		if sc.network {
			continue
		}
		for _, m := range memoryMakers() {
			b.Run(benchName(sc)+"/"+strings.ReplaceAll(m.name, " ", "_"), func(b *testing.B) {
				benchmark(b, sc, m, "")
			})
		}
	}
}

// BenchmarkRedis is the network scenario on the package's Redis server
// ($REDIS_ADDR, or redis-server from PATH).
func BenchmarkRedis(b *testing.B) {
	srv := testserver.Get(b, testserver.Redis)
	for _, sc := range scenarios(64) {
		if !sc.network {
			continue
		}
		for i, m := range networkMakers(srv.Addr, 64*runtime.GOMAXPROCS(0)) {
			b.Run(strings.ReplaceAll(m.name, " ", "_"), func(b *testing.B) {
				benchmark(b, sc, m, "peers:bench:"+strconv.FormatInt(time.Now().UnixNano(), 36)+":"+strconv.Itoa(i)+":")
			})
		}
	}
}

// benchName is a scenario's short name: "denying-1", "admitting-64".
func benchName(sc scenario) string {
	kind := "denying"
	if sc.warm == 1 {
		kind = "admitting"
	}
	return kind + "-" + strconv.Itoa(sc.goroutines)
}

func benchmark(b *testing.B, sc scenario, m maker, ns string) {
	c, err := m.open(sc.limit, sc.window, ns)
	if err != nil {
		b.Fatal(err)
	}
	defer c.close()
	keys := benchKeys()
	ctx := context.Background()
	for _, k := range keys {
		for range sc.warm {
			if _, err := c.allow(ctx, k); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	if sc.goroutines == 1 {
		for i := 0; i < b.N; i++ {
			if _, err := c.allow(ctx, keys[i%len(keys)]); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	var next atomic.Int64
	b.SetParallelism(max(1, sc.goroutines/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(97))
		for pb.Next() {
			i++
			if _, err := c.allow(ctx, keys[i%len(keys)]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func benchKeys() []string {
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	return keys
}
