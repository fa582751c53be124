package guard_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/backend/redis"
	"github.com/ratelimit-go/ratelimit/guard"
	"github.com/ratelimit-go/ratelimit/servertest/storetest"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// One stalled master of three sends only its own keys to the fallback,
// through both clients, single keys and Multi across masters alike.
func TestOneNodeDownStaysThatNodes(t *testing.T) {
	for _, c := range storetest.Clients {
		t.Run(c.Name, func(t *testing.T) { storetest.OneNodeDown(t, c.Kind, c.NewCluster) })
	}
}

// A guard over a cluster client whose nodes are all stalled when the app
// starts: go-redis cannot load the cluster's layout. The node lookup once
// waited for it on every call (context.Background(): the client's read
// timeout, 3 s by default, here 10 s, per node) before the fallback
// answered. Every call now ends within the Limiter's budget, by the
// fallback, far before the client's read timeout.
func TestAGuardOverAStalledClusterKeepsTheBudget(t *testing.T) {
	c := testserver.OwnReplicatedCluster(t, testserver.Redis, 30*time.Second)
	for _, n := range append(append([]*testserver.Server{}, c.Masters...), c.Replicas...) {
		require.NoError(t, n.Pause())
		t.Cleanup(func() { _ = n.Resume() })
	}
	const readTimeout = 10 * time.Second
	client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs, ReadTimeout: readTimeout, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	local, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = local.Close() })
	primary, err := redis.New(client)
	require.NoError(t, err)
	g, err := guard.New(primary, guard.WithFallback(local, 2))
	require.NoError(t, err)
	l, err := ratelimit.New(g, ratelimit.PerMinute(10), ratelimit.WithPrefix(storetest.Prefix()), ratelimit.WithTimeout(100*time.Millisecond))
	require.NoError(t, err)
	for i := 0; i < 5; i++ {
		began := time.Now()
		d, err := l.Allow(context.Background(), fmt.Sprint("user-", i))
		took := time.Since(began)
		require.NoError(t, err, "call %d", i)
		require.Equal(t, ratelimit.SourceFallback, d.Source, "call %d: the fallback decides", i)
		require.Less(t, took, readTimeout/3, "call %d took %v: it waited for the client's read timeout", i, took)
	}
}
