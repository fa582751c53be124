package redis_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/redis"
	"github.com/ratelimit-go/ratelimit/conformance"
	"github.com/ratelimit-go/ratelimit/servertest/storetest"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// Decisions through go-redis's auto-pipeliner (WithAutoPipeline).

// pipelined is a store on a new client of addr that sends decisions
// through its auto-pipeliner; the client honours deadlines or not.
func pipelined(t testing.TB, addr string, honours bool) *redis.Store {
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: honours})
	t.Cleanup(func() { _ = c.Close() })
	return store(t, c, redis.WithAutoPipeline(nil))
}

func TestAutoPipelinedConformance(t *testing.T) {
	addr := testserver.Get(t, testserver.Redis).Addr
	conformance.Run(t, func(t *testing.T) backend.Store { return pipelined(t, addr, true) })
}

func TestAutoPipelinedConformanceOnACluster(t *testing.T) {
	srv := testserver.OwnCluster(t, testserver.Redis)
	conformance.Run(t, func(t *testing.T) backend.Store {
		return store(t, clusterClient(t, srv.Addr), redis.WithAutoPipeline(nil))
	})
}

func TestAutoPipelinedReliability(t *testing.T) {
	srv := testserver.Get(t, testserver.Redis)
	storetest.Run(t, testserver.Redis, srv.Addr, func(t *testing.T, addr string) backend.Store {
		return pipelined(t, addr, false)
	})
}

// 64 callers at once, 3,200 requests on one key of limit 1,000: exactly
// 1,000 admitted, and the decisions shared the pipeliner's connection
// rather than one each (go-redis's pool would open up to 64).
func TestAutoPipelinedCallersShareAConnection(t *testing.T) {
	addr := testserver.Get(t, testserver.Redis).Addr
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64})
	t.Cleanup(func() { _ = c.Close() })
	for _, alg := range []ratelimit.Algorithm{ratelimit.SlidingWindow, ratelimit.FixedWindow, ratelimit.GCRA} {
		p := ratelimit.Policy{Limit: 1000, Window: time.Hour, Algorithm: alg}
		if alg == ratelimit.GCRA {
			p.Burst = p.Limit
		}
		l := newLimiter(t, store(t, c, redis.WithAutoPipeline(nil)), p)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					d, err := l.Allow(context.Background(), "k")
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		require.EqualValues(t, 1000, admitted.Load(), "%v: exactly the limit", alg)
	}
	require.LessOrEqual(t, c.PoolStats().TotalConns, uint32(3), "one connection for the batches (and one for a FUNCTION LOAD)")
}

// A Ring has no auto-pipeliner: New says so, and bad options are refused.
func TestAutoPipelineNeedsAClientWithOne(t *testing.T) {
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": testserver.Get(t, testserver.Redis).Addr}})
	t.Cleanup(func() { _ = ring.Close() })
	_, err := redis.New(ring, redis.WithAutoPipeline(nil))
	require.ErrorIs(t, err, backend.ErrInvalidArgument)

	c := client(t)
	_, err = redis.New(c, redis.WithAutoPipeline(&goredis.AutoPipelineOptions{MaxConcurrentBatches: 4}))
	require.ErrorIs(t, err, backend.ErrInvalidArgument, "more than one batch at once without Unordered")
}
