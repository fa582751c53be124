package nearcache_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/backend/redis"
	"github.com/ratelimit-go/ratelimit/conformance"
	"github.com/ratelimit-go/ratelimit/guard"
	"github.com/ratelimit-go/ratelimit/nearcache"
	"github.com/ratelimit-go/ratelimit/servertest/storetest"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// cached is nearcache.New(next), failing t on an error.
func cached(t testing.TB, next backend.Store) *nearcache.Store {
	s, err := nearcache.New(next)
	require.NoError(t, err)
	return s
}

// On a real server, with a cache per instance as app instances would have,
// the cache answers nothing the conformance suite could tell from the
// store's own answers.
func TestConformanceOnAServer(t *testing.T) {
	addr := testserver.Get(t, testserver.Redis).Addr
	conformance.Run(t, func(t *testing.T) backend.Store {
		c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, ReadTimeout: slowReply, WriteTimeout: slowReply})
		t.Cleanup(func() { _ = c.Close() })
		return cached(t, redisStore(t, c))
	})
}

// layers are the layers a store may be wrapped in, by name.
var layers = map[string]func(t *testing.T, next backend.Store) backend.Store{
	"guard": func(t *testing.T, next backend.Store) backend.Store {
		local, err := memory.New()
		require.NoError(t, err)
		t.Cleanup(func() { _ = local.Close() })
		g, err := guard.New(next, guard.WithFallback(local, 2))
		require.NoError(t, err)
		return g
	},
	"nearcache": func(t *testing.T, next backend.Store) backend.Store {
		c := cached(t, next)
		t.Cleanup(func() { _ = c.Close() })
		return c
	},
}

// orders are every sequence of up to three layers, in every order, each
// layer any number of times.
func orders() [][]string {
	out := [][]string{nil}
	for depth := 0; depth < 3; depth++ {
		for _, o := range out {
			if len(o) != depth {
				continue
			}
			for name := range layers {
				out = append(out, append(append([]string(nil), o...), name))
			}
		}
	}
	return out
}

// The order of the layers drops no ability: over a cluster's store, every
// wrapping names each key's node as the store itself (so a guard keeps a
// breaker per node), tells of the store's changes (so a near cache
// forgets a key reset elsewhere), decides and peeks at several requests
// together, refunds and charges; over the memory store, every wrapping is in process (no time
// budget) and tells of no change. guard(nearcache(redis)) once lost the
// per-node breakers, and a guard was never in process over a cache.
func TestEveryOrderOfLayersKeepsTheStoresAbilities(t *testing.T) {
	c := testserver.GetCluster(t, testserver.RedisCluster)
	client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs, ContextTimeoutEnabled: true, ReadTimeout: slowReply, WriteTimeout: slowReply})
	t.Cleanup(func() { _ = client.Close() })
	cluster := redisStore(t, client)
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	for i := 0; i < 30; i++ {
		key := fmt.Sprint("user-", i)
		require.Eventually(t, func() bool { return cluster.Info().Node("p:", key) != "" }, 10*time.Second, 10*time.Millisecond, "the cluster's layout")
	}
	rule, err := backend.NewRule(backend.FixedWindow, 10, time.Minute, 0, time.Minute, storetest.Prefix())
	require.NoError(t, err)
	for _, order := range orders() {
		name := "store"
		overCluster, overMemory := backend.Store(cluster), backend.Store(m)
		for _, layer := range order {
			overCluster, overMemory = layers[layer](t, overCluster), layers[layer](t, overMemory)
			name = layer + "(" + name + ")"
		}
		t.Run(name, func(t *testing.T) {
			info := overCluster.Info()
			require.NotNil(t, info.Node, "the nodes")
			nodes := map[string]bool{}
			for i := 0; i < 30; i++ {
				key := fmt.Sprint("user-", i)
				require.Equal(t, cluster.Info().Node("p:", key), info.Node("p:", key), key)
				nodes[info.Node("p:", key)] = true
			}
			require.Len(t, nodes, 3, "keys on each master")
			require.NotNil(t, info.Changes, "the changes")
			require.False(t, info.InProcess)
			for _, s := range []backend.Store{overCluster, overMemory} {
				// A turn of the window's minute between two steps resets
				// the count the later steps assert (the peek of a key
				// charged past its limit was once admitted under CI's
				// load): such a sequence runs again on a new key.
				for attempt := 0; !abilities(t, s, rule, fmt.Sprint(name, "-", len(order), "-", attempt)); attempt++ {
					require.Less(t, attempt, 2, "three sequences each crossed a window's end")
				}
			}
			mi := overMemory.Info()
			require.True(t, mi.InProcess, "over the memory store, in process")
			require.Nil(t, mi.Node, "one node")
			require.Nil(t, mi.Changes, "no change to tell of")
		})
	}
}

// abilities runs TakeAll, Refund, Charge and PeekAll on key of rule, a
// fixed window of limit 10, and on keys of every node, and checks what
// each answers; false, checking no count, when the window turned between
// two of the steps (their reset times differ).
func abilities(t *testing.T, s backend.Store, rule *backend.Rule, key string) bool {
	ctx := context.Background()
	outs := make([]backend.Outcome, 1)
	require.NoError(t, s.TakeAll(ctx, []backend.Request{{Rule: rule, Key: key, Cost: 2}}, outs), "TakeAll")
	took := outs[0]
	refunded, err := s.Refund(ctx, backend.Request{Rule: rule, Key: key, Cost: 1})
	if errors.Is(err, backend.ErrInvalidCost) { // nothing in use to give back: a new window?
		now, err := s.Peek(ctx, backend.Request{Rule: rule, Key: key, Cost: 1})
		require.NoError(t, err, "Peek")
		if now.ResetAt != took.ResetAt {
			return false
		}
	}
	require.NoError(t, err, "Refund")
	charged, err := s.Charge(ctx, backend.Request{Rule: rule, Key: key, Cost: 25})
	require.NoError(t, err, "Charge")
	// Several peeks in one call, on keys of every node.
	peeks := []backend.Request{{Rule: rule, Key: key, Cost: 1}}
	for i := 0; i < 6; i++ {
		peeks = append(peeks, backend.Request{Rule: rule, Key: fmt.Sprint("user-", i), Cost: 1})
	}
	outs = make([]backend.Outcome, len(peeks))
	require.NoError(t, s.PeekAll(ctx, peeks, outs), "PeekAll")
	if end := took.ResetAt; refunded.ResetAt != end || charged.ResetAt != end || outs[0].ResetAt != end {
		return false
	}
	require.True(t, took.Allowed())
	require.EqualValues(t, 1, refunded.Count)
	require.EqualValues(t, 26, charged.Count, "past the limit")
	require.False(t, charged.Allowed())
	require.False(t, outs[0].Allowed(), "%+v", outs[0])
	require.EqualValues(t, 26, outs[0].Count)
	for _, o := range outs[1:] {
		require.True(t, o.Allowed())
	}
	return true
}

// redisStore is redis.New(c), failing t on an error.
// slowReply is how long these tests' clients wait on a reply. The store
// ends a call no later than its client's read timeout (go-redis's default
// is 3s), and a cluster's first TakeAll under CI's load once took longer
// (context deadline exceeded): these tests call the store with no budget,
// and check what it answers, not how soon.
const slowReply = time.Minute

func redisStore(t testing.TB, c goredis.UniversalClient) *redis.Store {
	s, err := redis.New(c)
	require.NoError(t, err)
	return s
}
