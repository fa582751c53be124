package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/servertest/serverinfo"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// Every go-redis client ratelimitd builds honours the caller's context, so
// that the store sends each decision on the caller's goroutine: without it
// every decision ran in a goroutine of its own (rediscore.Bounded), whose
// stack grew on every call. No server is needed: a client connects lazily.
func TestGoRedisClientsHonourTheContext(t *testing.T) {
	for _, raw := range []string{
		"redis://127.0.0.1:1/0",
		"rediss://127.0.0.1:1",
		"unix:///tmp/no-such-redis.sock",
		"redis-cluster://127.0.0.1:1,127.0.0.1:2",
		"redis-sentinel://127.0.0.1:1?master_name=m",
	} {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		c, err := goredisClient(u, raw)
		require.NoError(t, err, raw)
		var honoured bool
		switch c := c.(type) {
		case *goredis.Client:
			honoured = c.Options().ContextTimeoutEnabled
		case *goredis.ClusterClient:
			honoured = c.Options().ContextTimeoutEnabled
		default:
			t.Fatalf("%s: a %T", raw, c)
		}
		require.True(t, honoured, raw)
		require.NoError(t, c.Close())
	}
}

// Under -count-over-limit every hit is a charge, which a near cache never
// answers: none is made (it only heard every other instance's charges).
func TestNoNearCacheWhenEveryHitCounts(t *testing.T) {
	for _, count := range []bool{false, true} {
		o, err := parseFlags([]string{"-config", "x.yaml"}, func(string) string { return "" }, io.Discard)
		require.NoError(t, err)
		o.countOverLimit = count
		s, err := openStore("redis://127.0.0.1:1", o, nil, slog.Default())
		require.NoError(t, err)
		if count {
			require.Zero(t, s.near, "-count-over-limit: no near cache")
		} else {
			require.Equal(t, o.nearCache, s.near, "the default's")
		}
		require.NoError(t, s.Close())
	}
}

// By default the decisions of concurrent requests reach the server in
// batches: 64 callers at once cost it fewer reads (total_reads_processed)
// than half their decisions, where -redis-auto-pipeline=false costs one a
// decision (both measured in the same run).
func TestConcurrentDecisionsShareReads(t *testing.T) {
	addr := testserver.Own(t, testserver.Redis).Addr
	admin := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = admin.Close() })
	reads := func() int64 {
		n, err := serverinfo.Reads(context.Background(), admin)
		require.NoError(t, err)
		return n
	}
	perDecision := map[bool]float64{}
	for _, pipelined := range []bool{true, false} {
		args := []string{"-config", "x.yaml", "-near-cache", "0"} // every decision the store's
		if !pipelined {
			args = append(args, "-redis-auto-pipeline=false")
		}
		o, err := parseFlags(args, func(string) string { return "" }, io.Discard)
		require.NoError(t, err)
		s, err := openStore("redis://"+addr+"?pool_size=64", o, nil, slog.Default())
		require.NoError(t, err)
		rule, err := backend.NewRule(backend.FixedWindow, 100, time.Hour, 0, time.Hour, fmt.Sprintf("pipe%v:", pipelined))
		require.NoError(t, err)
		_, err = s.top.Peek(context.Background(), backend.Request{Rule: rule, Key: "warm", Cost: 1}) // the function loaded
		require.NoError(t, err)
		before := reads()
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					_, err := s.top.Take(context.Background(), backend.Request{Rule: rule, Key: "k", Cost: 1})
					require.NoError(t, err)
				}
			}()
		}
		wg.Wait()
		perDecision[pipelined] = float64(reads()-before-1) / 3200
		require.NoError(t, s.Close())
	}
	t.Logf("server reads a decision: %.3f auto-pipelined, %.3f without", perDecision[true], perDecision[false])
	require.Less(t, perDecision[true], 0.5, "the decisions share reads")
	require.Greater(t, perDecision[false], 0.9, "without: a read a decision")
}
