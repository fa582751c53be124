package main

import (
	"io"
	"log/slog"
	"net/url"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
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
