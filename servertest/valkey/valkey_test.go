package valkey_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/backend/redis"
	"github.com/ratelimit-go/ratelimit/backend/valkey"
	"github.com/ratelimit-go/ratelimit/conformance"
	"github.com/ratelimit-go/ratelimit/guard"
	"github.com/ratelimit-go/ratelimit/servertest/storetest"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// client is a new client of the test server, closed after the test.
func client(t testing.TB) vk.Client { return newClient(t, testserver.Get(t, testserver.Valkey).Addr) }

func newClient(t testing.TB, addr string) vk.Client {
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func TestConformance(t *testing.T) {
	t.Logf("server: %s", testserver.Get(t, testserver.Valkey).Origin)
	conformance.Run(t, func(t *testing.T) backend.Store { return store(t, client(t)) })
}

// The expiry scenario with the server's TTLs on the kit's clock
// (storetest.KitClockExpiry), independent of real time: on a server of the
// test's own, whose every TTL the hook ages.
func TestConformanceExpiresOnTheKitsClock(t *testing.T) {
	c := newClient(t, testserver.Own(t, testserver.Valkey).Addr)
	conformance.RunStore(t, func(t *testing.T) backend.Store { return store(t, c) },
		conformance.Expire(storetest.KitClockExpiry(func(ctx context.Context, by time.Duration) error {
			return c.Do(ctx, c.B().Eval().Script(storetest.AgeScript).Numkeys(0).Arg(strconv.FormatInt(by.Milliseconds(), 10)).Build()).Error()
		})))
}

// On a real cluster, valkey-go panics on a command whose keys are in two
// slots: WithPrefix("x{}:") once split a sliding key's two server keys over
// two slots, and Allow panicked in the caller's goroutine. Prefixes are
// escaped as keys are, and no client panic reaches a caller.
func TestPrefixesWithBracesOnACluster(t *testing.T) {
	storetest.PrefixesOnACluster(t, store(t, clusterClient(t, testserver.OwnCluster(t, testserver.Valkey).Addr)))
}

// A real cluster of three masters with a replica each (a Valkey cluster
// where valkey-server is on PATH): the suite through valkey-go's cluster
// client, and the keys of 1,000 users spread over the masters.
func TestOnAThreeMasterCluster(t *testing.T) {
	c := testserver.GetCluster(t, testserver.ValkeyCluster)
	t.Logf("cluster: %s", c.Origin)
	t.Run("conformance", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) backend.Store { return store(t, clusterClient(t, c.Addrs...)) })
	})
	t.Run("keys spread over the masters", func(t *testing.T) { storetest.Spread(t, c.Addrs, store(t, clusterClient(t, c.Addrs...))) })
}

// A master of a real cluster killed under load (see storetest.Failover),
// plainly and behind a guard with a local fallback, which answers for the
// dead master's keys (and, while its breaker is open, for the others).
func TestFailover(t *testing.T) {
	t.Run("plain", func(t *testing.T) {
		storetest.Failover(t, testserver.Valkey, func(t *testing.T, addrs []string) backend.Store {
			return store(t, clusterClient(t, addrs...))
		}, true, false)
	})
	t.Run("guarded", func(t *testing.T) {
		storetest.Failover(t, testserver.Valkey, func(t *testing.T, addrs []string) backend.Store {
			local, err := memory.New()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = local.Close() })
			g, err := guard.New(store(t, clusterClient(t, addrs...)), guard.WithFallback(local, 1), guard.WithCoolDown(200*time.Millisecond))
			require.NoError(t, err)
			return g
		}, false, true)
	})
}

func clusterClient(t *testing.T, addrs ...string) vk.Client {
	c, err := vk.NewClient(vk.ClientOption{InitAddress: addrs, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// The Valkey backend passes the suite on a real cluster too, through
// valkey-go's cluster client.
func TestConformanceOnACluster(t *testing.T) {
	srv := testserver.OwnCluster(t, testserver.Valkey)
	conformance.Run(t, func(t *testing.T) backend.Store { return store(t, clusterClient(t, srv.Addr)) })
}

func limiter(t *testing.T, s backend.Store, p ratelimit.Policy) *ratelimit.Limiter {
	// A generous budget: these tests check answers, not speed.
	l, err := ratelimit.New(s, p, ratelimit.WithPrefix("test:"+t.Name()+":"), ratelimit.WithTimeout(10*time.Second))
	require.NoError(t, err)
	return l
}

// Both backends share scripts, key names and the server clock: requests
// through either count against one limit.
func TestSharesStateWithTheRedisBackend(t *testing.T) {
	srv := testserver.Get(t, testserver.Valkey)
	rc := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer rc.Close()
	ctx := context.Background()
	for _, alg := range backend.Algorithms() {
		p := ratelimit.NewPolicy(alg, 4, time.Hour) // no fixed window ends mid-test
		viaValkey, viaRedis := limiter(t, store(t, client(t)), p), limiter(t, redisStore(t, rc), p)
		for i := 1; i <= 4; i++ {
			l := viaValkey
			if i%2 == 0 {
				l = viaRedis
			}
			d, err := l.Allow(ctx, "user")
			require.NoError(t, err)
			require.True(t, d.Allowed)
			require.Equal(t, i, d.Count, "%v: request %d counts those of the other backend", alg, i)
		}
		d, err := viaRedis.Allow(ctx, "user")
		require.NoError(t, err)
		require.False(t, d.Allowed, alg.String())
		require.NoError(t, viaRedis.Reset(ctx, "user"))
		d, err = viaValkey.Peek(ctx, "user")
		require.NoError(t, err)
		require.Equal(t, 0, d.Count, "%v: a reset through one backend is seen by the other", alg)
	}
}

func TestReliability(t *testing.T) {
	srv := testserver.Get(t, testserver.Valkey)
	storetest.Run(t, testserver.Valkey, srv.Addr, func(t *testing.T, addr string) backend.Store {
		return store(t, newClient(t, addr))
	})
}

// A failover with a lagging replica forgets the admissions it did not get,
// but none that a store built WithReplicaAck told its caller of.
func TestALaggingReplicaForgetsOnlyWhatWasNotAcknowledged(t *testing.T) {
	storetest.LaggingReplica(t, testserver.Valkey,
		func(t *testing.T, addrs []string) backend.Store { return store(t, clusterClient(t, addrs...)) },
		func(t *testing.T, addrs []string) backend.Store {
			return store(t, clusterClient(t, addrs...), valkey.WithReplicaAck(1, 500*time.Millisecond))
		}, valkey.ErrNotReplicated)
}

// A server with functions runs each decision as one FCALL; one without, as
// one EVALSHA.
func TestFunctionsWhereTheServerHasThem(t *testing.T) {
	storetest.Functions(t, testserver.Valkey, func(t *testing.T, addr string) backend.Store {
		return store(t, newClient(t, addr))
	})
}

// store is valkey.New(c, opts...), failing t on an error.
func store(t testing.TB, c vk.Client, opts ...valkey.Option) *valkey.Store {
	s, err := valkey.New(c, opts...)
	require.NoError(t, err)
	return s
}

// redisStore is redis.New(c), failing t on an error.
func redisStore(t testing.TB, c redis.Client) *redis.Store {
	s, err := redis.New(c)
	require.NoError(t, err)
	return s
}

// A nil client, or a replica ack out of bounds, is refused with an error.
func TestNewRefusesBadArguments(t *testing.T) {
	_, err := valkey.New(nil)
	require.ErrorIs(t, err, backend.ErrInvalidArgument)
	c := client(t)
	for _, ack := range []valkey.Option{valkey.WithReplicaAck(-1, time.Second), valkey.WithReplicaAck(1, time.Microsecond)} {
		_, err = valkey.New(c, ack)
		require.ErrorIs(t, err, backend.ErrInvalidArgument)
	}
}
