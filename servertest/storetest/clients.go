package storetest

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/redis"
	"github.com/ratelimit-go/ratelimit/backend/valkey"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// Client is a Redis-protocol store through one client library: what the
// layers over a store (guard, nearcache) run their server tests on.
type Client struct {
	Name       string
	Kind       testserver.Kind        // the server its package's tests start
	Cluster    testserver.ClusterKind // the cluster they share
	New        NewStore
	NewCluster NewClusterStore
}

// Clients are the stores on each client library, built as their packages'
// documentation asks (go-redis with ContextTimeoutEnabled).
var Clients = []Client{
	{"redis", testserver.Redis, testserver.RedisCluster, RedisStore, RedisClusterStore},
	{"valkey", testserver.Valkey, testserver.ValkeyCluster, ValkeyStore, ValkeyClusterStore},
}

// RedisClusterStore is a Redis store on a new go-redis cluster client of
// addrs, closed after t.
func RedisClusterStore(t *testing.T, addrs []string) backend.Store {
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redis.New(c)
	require.NoError(t, err)
	return s
}

// ValkeyClusterStore is a Valkey store on a new valkey-go client of addrs
// (a cluster client: valkey-go detects it), closed after t.
func ValkeyClusterStore(t *testing.T, addrs []string) backend.Store {
	c, err := vk.NewClient(vk.ClientOption{InitAddress: addrs, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	s, err := valkey.New(c)
	require.NoError(t, err)
	return s
}

// RedisStore is a Redis store on a new go-redis client of addr, closed
// after t.
func RedisStore(t *testing.T, addr string) backend.Store {
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redis.New(c)
	require.NoError(t, err)
	return s
}

// ValkeyStore is a Valkey store on a new valkey-go client of addr, closed
// after t.
func ValkeyStore(t *testing.T, addr string) backend.Store {
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	s, err := valkey.New(c)
	require.NoError(t, err)
	return s
}
