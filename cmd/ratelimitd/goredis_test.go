package main

import (
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
