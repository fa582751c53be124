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
	"github.com/ratelimit-go/ratelimit/servertest/serverinfo"
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
// 1,000 admitted, and the decisions reached the server in batches: fewer
// reads of the server (total_reads_processed, one per arrival of a
// client's bytes) than half the decisions, where each decision of the
// plain client is a read of its own (measured in the same run).
func TestAutoPipelinedCallersShareReads(t *testing.T) {
	addr := testserver.Own(t, testserver.Redis).Addr
	admin := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = admin.Close() })
	reads := func() int64 {
		n, err := serverinfo.Reads(context.Background(), admin)
		require.NoError(t, err)
		return n
	}
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64})
	t.Cleanup(func() { _ = c.Close() })
	perDecision := map[bool]float64{}
	for _, pipelined := range []bool{false, true} {
		for _, alg := range []ratelimit.Algorithm{ratelimit.SlidingWindow, ratelimit.FixedWindow, ratelimit.GCRA} {
			p := ratelimit.Policy{Limit: 1000, Window: time.Hour, Algorithm: alg}
			if alg == ratelimit.GCRA {
				p.Burst = p.Limit
			}
			var opts []redis.Option
			if pipelined {
				opts = append(opts, redis.WithAutoPipeline(nil))
			}
			l := newLimiter(t, store(t, c, opts...), p, ratelimit.WithTimeout(10*time.Second))
			_, err := l.Peek(context.Background(), "warm") // the function loaded
			require.NoError(t, err)
			key := "plain"
			if pipelined {
				key = "pipelined"
			}
			before := reads()
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 50 {
						d, err := l.Allow(context.Background(), key)
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
			perDecision[pipelined] = max(perDecision[pipelined], float64(reads()-before-1)/3200)
			require.EqualValues(t, 1000, admitted.Load(), "%v: exactly the limit", alg)
		}
	}
	t.Logf("server reads a decision: %.3f plain, %.3f auto-pipelined", perDecision[false], perDecision[true])
	require.Greater(t, perDecision[false], 0.9, "the plain client: a read a decision")
	require.Less(t, perDecision[true], 0.5, "auto-pipelined: decisions share reads")
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
