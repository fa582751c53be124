package nearcache_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/nearcache"
	"github.com/ratelimit-go/ratelimit/servertest/storetest"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// The near cache against real servers, through both clients: it hears the
// changes other instances make.

// onServers runs check on the package's server of each client library.
func onServers(t *testing.T, check func(t *testing.T, addr string, newStore storetest.NewStore)) {
	for _, c := range storetest.Clients {
		t.Run(c.Name, func(t *testing.T) { check(t, testserver.Get(t, c.Kind).Addr, c.New) })
	}
}

// TestNearCachesHearResets: two instances, each with a near cache over its own
// client of the server at addr, limit 5 per window. Instance A is at its
// limit and answers denials from its cache; a Reset (then a Refund) made
// through instance B must let A admit, under every algorithm, long before
// its cached denial (of 100 days) ends: before the stores told of changes,
// the cache kept denying for the rest of its RetryAfter. When A's
// subscription is killed, A stops answering from its cache until it hears
// the channel again.
func TestNearCachesHearResets(t *testing.T) {
	onServers(t, nearCachesHearResets)
}

func nearCachesHearResets(t *testing.T, addr string, newStore storetest.NewStore) {
	ctx := context.Background()
	for _, alg := range backend.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			pre := storetest.Prefix()
			cached := func() (*ratelimit.Limiter, *nearcache.Store) {
				c, err := nearcache.New(newStore(t, addr))
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close() })
				// A window of 100 days: a fixed window's boundary does not pass
				// during the test.
				return storetest.Limiter(t, c, ratelimit.NewPolicy(alg, 5, ratelimit.MaxWindow), pre), c
			}
			a, ca := cached()
			b, _ := cached()
			fill := func() {
				t.Helper()
				for i := 0; i < 5; i++ {
					_, err := a.Allow(ctx, "user")
					require.NoError(t, err)
				}
				// A's denials come from its cache once it hears the channel.
				fromCache := false
				for deadline := time.Now().Add(5 * time.Second); !fromCache && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
					hits := ca.Hits()
					d, err := a.Allow(ctx, "user")
					require.NoError(t, err)
					require.False(t, d.Allowed, "A is at its limit")
					fromCache = ca.Hits() > hits
				}
				require.True(t, fromCache, "A answers denials from its cache")
			}
			admitsWithin := func(what string) time.Duration {
				t.Helper()
				began := time.Now()
				for time.Since(began) < 10*time.Second { // a bound on the wait, not a latency
					d, err := a.Allow(ctx, "user")
					require.NoError(t, err)
					if d.Allowed {
						return time.Since(began)
					}
					time.Sleep(time.Millisecond)
				}
				t.Fatalf("%s through B: A still denied after 10s", what)
				return 0
			}

			fill()
			require.NoError(t, b.Reset(ctx, "user"))
			afterReset := admitsWithin("a Reset")
			require.NoError(t, b.Reset(ctx, "user"))
			fill()
			_, err := b.Refund(ctx, "user", 5)
			require.NoError(t, err)
			afterRefund := admitsWithin("a Refund")
			// Admitted at all: the cached denial held for 100 days more, so
			// only the change heard can have ended it. How soon is logged,
			// not asserted: a busy machine delays a message as it pleases.
			t.Logf("A admitted %v after B's Reset, %v after B's Refund", afterReset.Round(time.Microsecond), afterRefund.Round(time.Microsecond))

			// A's subscription dies: within a heartbeat's lapse A asks the
			// store every time, until it hears the channel again.
			require.NoError(t, b.Reset(ctx, "user"))
			fill()
			require.NoError(t, storetest.Admin(t, addr).Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
			asks := false
			for deadline := time.Now().Add(5 * time.Second); !asks && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				hits := ca.Hits()
				_, err := a.Allow(ctx, "user")
				require.NoError(t, err)
				asks = ca.Hits() == hits
			}
			require.True(t, asks, "a cache that may miss changes asks the store")
		})
	}
}

// listenApart is a store whose commands go through one client and whose
// channel of changes is heard through another: what a slow command
// connection beside a fast subscription looks like to a near cache.
type listenApart struct {
	backend.Store
	listen backend.Store
}

func (s listenApart) Info() backend.Info {
	info := s.Store.Info()
	info.Changes = s.listen.Info().Changes
	return info
}

// TestNearCacheDropsOvertakenDenials: instance A's denial is still on its way
// (its reply held at a gate) when B resets the key and A hears of it; the
// denial then arrives. A must not cache it: it predates the Reset. Before
// the cache compared generations, it cached the obsolete denial and served
// it until its RetryAfter (here 100 days). The gate orders the events
// exactly, whatever the machine's load.
func TestNearCacheDropsOvertakenDenials(t *testing.T) {
	onServers(t, nearCacheDropsOvertakenDenials)
}

func nearCacheDropsOvertakenDenials(t *testing.T, addr string, newStore storetest.NewStore) {
	ctx := context.Background()
	for _, alg := range backend.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			gate := testserver.NewGate(t, addr)
			listen := newStore(t, addr)
			require.NotNil(t, listen.Info().Changes, "the store tells of changes")
			ca, err := nearcache.New(listenApart{newStore(t, gate.Addr), listen})
			require.NoError(t, err)
			t.Cleanup(func() { _ = ca.Close() })
			pre, p := storetest.Prefix(), ratelimit.NewPolicy(alg, 5, ratelimit.MaxWindow)
			a, b := storetest.Limiter(t, ca, p, pre), storetest.Limiter(t, newStore(t, addr), p, pre)

			// A holds a cached denial of "probe", and "user" is at its limit.
			for _, key := range []string{"probe", "user"} {
				for i := 0; i < 5; i++ {
					d, err := a.Allow(ctx, key)
					require.NoError(t, err)
					require.True(t, d.Allowed, key)
				}
			}
			for deadline := time.Now().Add(10 * time.Second); ca.Len() == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				_, err := a.Allow(ctx, "probe")
				require.NoError(t, err)
			}
			require.Equal(t, 1, ca.Len(), "A caches the denial of probe once it hears the channel")

			gate.HoldDecisions()
			denied := make(chan error, 1)
			go func() {
				d, err := a.Allow(ctx, "user")
				if err == nil && d.Allowed {
					err = fmt.Errorf("user admitted over its limit")
				}
				denied <- err
			}()
			<-gate.Waiting() // the store denied user; the reply waits at the gate
			require.NoError(t, b.Reset(ctx, "user"))
			require.NoError(t, b.Reset(ctx, "probe")) // heard after user's: the channel keeps order
			for deadline := time.Now().Add(10 * time.Second); ca.Len() != 0 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			}
			require.Zero(t, ca.Len(), "A heard both Resets")
			gate.Release()
			require.NoError(t, <-denied)

			hits := ca.Hits()
			d, err := a.Allow(ctx, "user")
			require.NoError(t, err)
			require.True(t, d.Allowed, "A admits user after B's Reset (from its cache: %v)", ca.Hits() > hits)
		})
	}
}
