package main

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/backend/redis"
	"github.com/ratelimit-go/ratelimit/backend/valkey"
	"github.com/ratelimit-go/ratelimit/conformance"
	"github.com/ratelimit-go/ratelimit/guard"
	"github.com/ratelimit-go/ratelimit/servertest/storetest"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func BenchmarkMemory(b *testing.B) {
	s, err := memory.New()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	conformance.Benchmark(b, s)
}

func BenchmarkRedis(b *testing.B) {
	srv := testserver.Get(b, testserver.Redis)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, PoolSize: 64, ContextTimeoutEnabled: true})
	defer c.Close()
	s, err := redis.New(c)
	if err != nil {
		b.Fatal(err)
	}
	conformance.Benchmark(b, s)
}

func BenchmarkValkey(b *testing.B) { conformance.Benchmark(b, valkeyStore(b)) }

// valkeyClient is a client of the package's Valkey test server, as the
// bench builds it, closed after b.
func valkeyClient(b *testing.B) vk.Client {
	srv := testserver.Get(b, testserver.Valkey)
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true, MaxFlushDelay: valkeyFlushDelay})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}

// BenchmarkValkeyGuarded is BenchmarkValkey through a guard.Store (a circuit
// breaker, and a memory fallback that a healthy server never uses): what the
// breaker costs in front of a network store.
func BenchmarkValkeyGuarded(b *testing.B) {
	local, err := memory.New()
	if err != nil {
		b.Fatal(err)
	}
	defer local.Close()
	g, err := guard.New(valkeyStore(b), guard.WithFallback(local, 1))
	if err != nil {
		b.Fatal(err)
	}
	conformance.Benchmark(b, g)
}

// valkeyStore is a store on valkeyClient(b).
func valkeyStore(b *testing.B) *valkey.Store {
	s, err := valkey.New(valkeyClient(b))
	if err != nil {
		b.Fatal(err)
	}
	return s
}
