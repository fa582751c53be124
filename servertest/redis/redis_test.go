package redis_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/redis"
	"github.com/ratelimit-go/ratelimit/conformance"
	"github.com/ratelimit-go/ratelimit/guard"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
	"github.com/ratelimit-go/ratelimit/servertest/storetest"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// client is a new client of the test server, closed after the test.
func client(t testing.TB) *goredis.Client {
	return newClient(t, testserver.Get(t, testserver.Redis).Addr)
}

// newClient is a client of the server at addr that honours deadlines, as the
// package documentation asks, closed after the test.
func newClient(t testing.TB, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestConformance(t *testing.T) {
	t.Logf("server: %s", testserver.Get(t, testserver.Redis).Origin)
	conformance.Run(t, func(t *testing.T) backend.Store { return store(t, client(t)) })
}

// The expiry scenario with the server's TTLs on the kit's clock
// (storetest.KitClockExpiry), independent of real time: on a server of the
// test's own, whose every TTL the hook ages.
func TestConformanceExpiresOnTheKitsClock(t *testing.T) {
	c := newClient(t, testserver.Own(t, testserver.Redis).Addr)
	conformance.RunStore(t, func(t *testing.T) backend.Store { return store(t, c) },
		conformance.Expire(storetest.KitClockExpiry(func(ctx context.Context, by time.Duration) error {
			return c.Eval(ctx, storetest.AgeScript, nil, by.Milliseconds()).Err()
		})))
}

// A real one-node Redis Cluster: a script touching keys of two slots fails
// there with CROSSSLOT, so the whole suite passing proves the hash tags.
func TestConformanceOnACluster(t *testing.T) {
	srv := testserver.OwnCluster(t, testserver.Redis)
	conformance.Run(t, func(t *testing.T) backend.Store { return store(t, clusterClient(t, srv.Addr)) })
}

// A real cluster of three masters with a replica each: the suite through a
// ClusterClient, and the keys of 1,000 users spread over the masters.
func TestOnAThreeMasterCluster(t *testing.T) {
	c := testserver.GetCluster(t, testserver.RedisCluster)
	t.Logf("cluster: %s", c.Origin)
	t.Run("conformance", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) backend.Store { return store(t, clusterClient(t, c.Addrs...)) })
	})
	t.Run("conformance through a guard with a breaker per node", func(t *testing.T) {
		conformance.RunStore(t, func(t *testing.T) backend.Store {
			g, err := guard.New(store(t, clusterClient(t, c.Addrs...)))
			require.NoError(t, err)
			return g
		})
	})
	t.Run("keys spread over the masters", func(t *testing.T) { storetest.Spread(t, c.Addrs, store(t, clusterClient(t, c.Addrs...))) })
}

// A master of a real cluster killed under load (see storetest.Failover):
// with go-redis's defaults, decisions for its keys resume after the failover
// (they did not for 15s and more before the store asked the client to
// reload the layout on errors), but a dead node's calls back off until the
// time budget, holding their callers; without the backoff (and with one
// dial per attempt rather than five 100ms apart) they fail at once and the
// other masters' keys are decided at full speed.
func TestFailover(t *testing.T) {
	t.Run("go-redis defaults", func(t *testing.T) {
		storetest.Failover(t, testserver.Redis, func(t *testing.T, addrs []string) backend.Store {
			return store(t, clusterClient(t, addrs...))
		}, false, false)
	})
	t.Run("no retry backoff", func(t *testing.T) {
		storetest.Failover(t, testserver.Redis, func(t *testing.T, addrs []string) backend.Store {
			c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true,
				MinRetryBackoff: -1, MaxRetryBackoff: -1,
				NewClient: func(opt *goredis.Options) *goredis.Client {
					opt.DialerRetries = 1 // one dial to a dead node, not five 100ms apart
					return goredis.NewClient(opt)
				}})
			t.Cleanup(func() { _ = c.Close() })
			return store(t, c)
		}, true, false)
	})
}

func clusterClient(t testing.TB, addrs ...string) *goredis.ClusterClient {
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A prefix holding braces once split a key's server keys over two slots:
// "x{}:" made every sliding decision fail with CROSSSLOT on a cluster.
func TestPrefixesWithBracesOnACluster(t *testing.T) {
	storetest.PrefixesOnACluster(t, store(t, clusterClient(t, testserver.OwnCluster(t, testserver.Redis).Addr)))
}

func newLimiter(t *testing.T, s backend.Store, p ratelimit.Policy, opts ...ratelimit.Option) *ratelimit.Limiter {
	t.Helper()
	// A generous budget: these tests check answers, not speed, and a
	// loaded machine must not fail them for a slow call.
	opts = append([]ratelimit.Option{ratelimit.WithPrefix(prefix(t)), ratelimit.WithTimeout(10 * time.Second)}, opts...)
	l, err := ratelimit.New(s, p, opts...)
	require.NoError(t, err)
	return l
}

// prefix is the prefix of t's keys, one a run of a test: a second run
// (-count=2, or a server kept between runs through REDIS_ADDR) finds none
// of an earlier run's keys (TestMultiOnOneKeyIsOneCommand failed its second
// run so, its per-second key still full).
func prefix(t *testing.T) string {
	p, _ := prefixes.LoadOrStore(t, fmt.Sprintf("test:%s:%d:", t.Name(), time.Now().UnixNano()))
	return p.(string)
}

var prefixes sync.Map // *testing.T -> its prefix

// Every key of one caller's key, under every prefix and algorithm, has one
// hash tag, so one script may decide several policies on it.
func TestKeysShareOneHashTag(t *testing.T) {
	for _, key := range []string{"user42", "{user42}", "}x", "a{b}c", "%7B", "{", "}", "a}b{c"} {
		var tags []string
		for _, prefix := range []string{ratelimit.DefaultPrefix, "", "x{}:", "{p}"} {
			all := lua.AllKeys(prefix, key)
			for _, alg := range backend.Algorithms() {
				p := ratelimit.NewPolicy(alg, 1, time.Second)
				rule, err := backend.NewRule(alg, int64(p.Limit), p.Window, int64(p.Burst), p.Window, prefix)
				require.NoError(t, err)
				keys := lua.Keys(backend.Request{Rule: rule, Key: key, Cost: 1})
				require.Subset(t, all, keys, "Reset deletes every key of the state")
			}
			for _, k := range all {
				require.NotEqual(t, k, lua.HashTag(k), "key %q: %q has no hash tag", key, k)
				tags = append(tags, lua.HashTag(k))
			}
		}
		for _, tag := range tags {
			require.Equal(t, tags[0], tag, "key %q", key)
		}
	}
}

func TestMemoryOfAFullKey(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	for _, limit := range []int{100, 1000} {
		key := fmt.Sprint("user-", limit)
		now := time.Now()
		l := newLimiter(t, store(t, c), ratelimit.Policy{Limit: limit, Window: time.Minute},
			ratelimit.WithCallerClock(func() time.Time { return now }))
		require.NoError(t, l.Reset(ctx, key)) // nothing left by an earlier run
		// Fill the key, let the window pass, again, until the entry ids
		// (4,096 of them at these limits) have gone round: a key in long use.
		for fill := 0; fill < 4096/limit+2; fill++ {
			for j := 0; j < limit; j++ {
				d, err := l.Allow(ctx, key)
				require.NoError(t, err)
				require.True(t, d.Allowed, "fill %d, request %d", fill, j)
			}
			now = now.Add(time.Minute)
		}
		keys := keysOf(t, prefix(t), key, l.Policy())
		logBytes := c.MemoryUsage(ctx, keys[0]).Val()
		if limit <= lua.ShortLog { // a string of a header and the units' times, no meta
			log, err := c.Get(ctx, keys[0]).Bytes()
			require.NoError(t, err)
			require.Len(t, log, 16+8*limit, "a short log: a header of 16 bytes, and 8 bytes a unit")
			require.Zero(t, c.Exists(ctx, keys[1]).Val(), "a short log has no meta")
			t.Logf("limit %d: MEMORY USAGE %d B for the log", limit, logBytes)
			require.LessOrEqual(t, logBytes, int64(8*limit+200), "a full key at limit %d: its units and the key", limit)
		} else {
			require.EqualValues(t, limit, c.ZCard(ctx, keys[0]).Val())
			meta, err := c.Get(ctx, keys[1]).Bytes()
			require.NoError(t, err)
			require.Len(t, meta, 48, "the meta: six packed doubles")
			last := int(math.Float64frombits(binary.LittleEndian.Uint64(meta))) // n, the counter naming entries
			require.Greater(t, limit*(4096/limit+2), 4096, "more entries were made than there are ids")
			require.LessOrEqual(t, last, 4096, "the ids have gone round, within their span")
			metaBytes := c.MemoryUsage(ctx, keys[1]).Val()
			t.Logf("limit %d: MEMORY USAGE %d B for the log, %d B for its meta", limit, logBytes, metaBytes)
			// The meta, which counts the log's entries, never outlives the
			// log: read after the log's TTL, it is no longer.
			logTTL := c.PTTL(ctx, keys[0]).Val()
			require.LessOrEqual(t, c.PTTL(ctx, keys[1]).Val(), logTTL, "the meta's TTL")
		}
		ttl := c.PTTL(ctx, keys[0]).Val()
		require.Greater(t, ttl, time.Minute-time.Second, "the TTL covers the window")
		require.LessOrEqual(t, ttl, time.Minute+time.Duration(lua.TTLSlack)*time.Millisecond)
	}
}

// A limit lowered to a short log's on a key whose sorted set holds more
// units than a short log would: the set is decided as it is, not copied
// into a string every call, until enough have left the window (moving a
// full 10,000-entry log took 15-25 ms, and each decision on the string
// 0.4 ms, against about 0.01 for the set).
func TestALongLogUnderAShortLimitStaysASortedSet(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	now := time.Now()
	const long = 1000
	l := newLimiter(t, store(t, c), ratelimit.Policy{Limit: long, Window: time.Minute},
		ratelimit.WithCallerClock(func() time.Time { return now }))
	for i := 0; i < long; i++ {
		now = now.Add(time.Millisecond)
		_, err := l.Allow(ctx, "k")
		require.NoError(t, err)
	}
	require.NoError(t, l.SetPolicy(ratelimit.Policy{Limit: 100, Window: time.Minute}))
	keys := keysOf(t, prefix(t), "k", l.Policy())
	d, err := l.Allow(ctx, "k")
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Equal(t, long, d.Count, "every entry still counts")
	require.Equal(t, "zset", c.Type(ctx, keys[0]).Val(), "too long to move")
	now = now.Add(time.Minute - 50*time.Millisecond) // 950 entries have left, 50 are left
	d, err = l.Allow(ctx, "k")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, 51, d.Count)
	require.Equal(t, "string", c.Type(ctx, keys[0]).Val(), "a short log now")
	require.Zero(t, c.Exists(ctx, keys[1]).Val(), "no meta")
}

// go-redis honours deadlines only with ContextTimeoutEnabled; the store
// honours them without it too (TestReliability covers the client with it).
func TestHonoursTheDeadlineWithoutContextTimeoutEnabled(t *testing.T) {
	srv := testserver.Get(t, testserver.Redis)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	storetest.SlowServer(t, srv.Addr, store(t, c))
}

// A time budget longer than go-redis's read timeout (3s): the store ends the
// call at the read timeout, before go-redis would retry the script.
// Without ContextTimeoutEnabled, go-redis goes on in the background after
// the store has returned, and must not retry there either.
func TestALongBudgetIsNotRetriedEither(t *testing.T) {
	t.Run("ContextTimeoutEnabled", func(t *testing.T) {
		storetest.NotRetried(t, testserver.Redis, func(t *testing.T, addr string) backend.Store {
			return store(t, newClient(t, addr))
		}, 10*time.Second)
	})
	t.Run("without", func(t *testing.T) {
		storetest.NotRetried(t, testserver.Redis, func(t *testing.T, addr string) backend.Store {
			c := goredis.NewClient(&goredis.Options{Addr: addr})
			t.Cleanup(func() { _ = c.Close() })
			return store(t, c)
		}, 10*time.Second)
	})
}

func TestReliability(t *testing.T) {
	srv := testserver.Get(t, testserver.Redis)
	storetest.Run(t, testserver.Redis, srv.Addr, func(t *testing.T, addr string) backend.Store {
		return store(t, newClient(t, addr))
	})
}

// On the server's clock the sliding log renews its keys' TTLs only when they
// would not cover the state's life (at most once per TTLSlack under steady
// use): a log that emptied (Redis deletes an empty sorted set) and came back
// must get its TTL all the same, or it would outlive its use forever. A
// short log, one string, sets its TTL with every write.
func TestASlidingLogAlwaysHasATTL(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	const window = 100 * time.Millisecond
	for _, limit := range []int{3, lua.ShortLog + 1} {
		pre := fmt.Sprintf("%s%d:", prefix(t), limit)
		l, err := ratelimit.New(store(t, c), ratelimit.PerSecond(3), ratelimit.WithPrefix(pre), ratelimit.WithTimeout(10*time.Second))
		require.NoError(t, err)
		require.NoError(t, l.SetPolicy(ratelimit.Policy{Limit: limit, Window: window}))
		req := backend.Request{Rule: ruleOf(t, pre, l.Policy()), Key: "k", Cost: 1}
		keys := lua.StoredKeys(req)
		require.Len(t, keys, map[bool]int{true: 1, false: 2}[limit <= lua.ShortLog])
		for round := 0; round < 3; round++ {
			for i := 0; i < 3; i++ {
				_, err := l.Allow(ctx, "k")
				require.NoError(t, err)
				for _, k := range keys {
					ttl := c.PTTL(ctx, k).Val()
					require.Greater(t, ttl, window, "limit %d, round %d, request %d: the TTL of %s covers the window", limit, round, i, k)
					require.LessOrEqual(t, ttl, time.Second+time.Duration(lua.TTLSlack)*time.Millisecond, "round %d: %s", round, k)
				}
			}
			time.Sleep(window + 50*time.Millisecond) // the log empties at the next request's prune
		}
	}
}

// ruleOf is p compiled for keys under prefix, as a Limiter compiles it.
func ruleOf(t *testing.T, prefix string, p ratelimit.Policy) *backend.Rule {
	rule, err := backend.NewRule(p.Algorithm, int64(p.Limit), p.Window, int64(p.Burst), p.Window, prefix)
	require.NoError(t, err)
	return rule
}

// keysOf are the server keys of key's state under prefix and p.
func keysOf(t *testing.T, prefix, key string, p ratelimit.Policy) []string {
	return lua.Keys(backend.Request{Rule: ruleOf(t, prefix, p), Key: key, Cost: 1})
}

// A failover with a lagging replica forgets the admissions it did not get,
// but none that a store built WithReplicaAck told its caller of.
func TestALaggingReplicaForgetsOnlyWhatWasNotAcknowledged(t *testing.T) {
	storetest.LaggingReplica(t, testserver.Redis,
		func(t *testing.T, addrs []string) backend.Store { return store(t, clusterClient(t, addrs...)) },
		func(t *testing.T, addrs []string) backend.Store {
			return store(t, clusterClient(t, addrs...), redis.WithReplicaAck(1, 500*time.Millisecond))
		}, redis.ErrNotReplicated)
}

// store is redis.New(c, opts...), failing t on an error.
func store(t testing.TB, c redis.Client, opts ...redis.Option) *redis.Store {
	s, err := redis.New(c, opts...)
	require.NoError(t, err)
	return s
}
