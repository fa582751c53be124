package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/nearcache"
	"github.com/ratelimit-go/ratelimit/servertest/serverinfo"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// FrontEnds runs the checks that the layers work through every front end,
// on a server of kind of its own (its command counts are theirs alone).
func FrontEnds(t *testing.T, kind testserver.Kind, newStore NewStore) {
	srv := testserver.Own(t, kind)
	t.Run("a near cache answers floods behind Multi and httplimit", func(t *testing.T) { nearCacheBehindMulti(t, srv.Addr, newStore) })
	t.Run("several keys on one server: one script a request, each decision observed once", func(t *testing.T) {
		multiOneScript(t, srv.Addr, newStore)
	})
	t.Run("TakeAll decides as the memory store does", func(t *testing.T) { TakeAllAsMemory(t, kind, newStore) })
}

// scripts counts the scripts the server at addr ran that did not fail.
func scripts(t *testing.T, a *goredis.Client) int64 {
	t.Helper()
	stats, err := serverinfo.CommandStats(context.Background(), a)
	require.NoError(t, err)
	s := serverinfo.Scripts(stats)
	return s.Calls - stats["fcall"].Failed - stats["evalsha"].Failed - stats["eval"].Failed
}

// nearCacheBehindMulti: a key at its limit of 5 per minute, 40 requests
// through Multi and through httplimit (which decides through Multi): at most
// 10 scripts reach the server. Multi took the TakeAll path past the cache,
// and every request reached the server (41 and 40 scripts).
func nearCacheBehindMulti(t *testing.T, addr string, newStore NewStore) {
	ctx, a := context.Background(), Admin(t, addr)
	for _, alg := range backend.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			cache, err := nearcache.New(newStore(t, addr))
			require.NoError(t, err)
			t.Cleanup(func() { _ = cache.Close() })
			l := Limiter(t, cache, ratelimit.NewPolicy(alg, 5, time.Minute), Prefix())
			// The cache answers once it hears the channel of changes.
			for deadline := time.Now().Add(10 * time.Second); cache.Hits() == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				_, err := l.Allow(ctx, "probe")
				require.NoError(t, err)
			}
			require.Positive(t, cache.Hits(), "the cache answers a denied probe")

			m, err := ratelimit.NewMulti(l)
			require.NoError(t, err)
			before := scripts(t, a)
			admitted := 0
			for i := 0; i < 40; i++ {
				d, err := m.Allow(ctx, "multi")
				require.NoError(t, err)
				if d.Allowed {
					admitted++
				}
			}
			require.Equal(t, 5, admitted, "Multi")
			viaMulti := scripts(t, a) - before
			require.LessOrEqual(t, viaMulti, int64(10), "scripts for 40 Multi requests")

			mw, err := httplimit.New([]httplimit.Rule{{Limiter: l, Key: func(*http.Request) (string, error) { return "http", nil }}})
			require.NoError(t, err)
			h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			before = scripts(t, a)
			codes := map[int]int{}
			for i := 0; i < 40; i++ {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
				codes[w.Code]++
			}
			require.Equal(t, map[int]int{http.StatusOK: 5, http.StatusTooManyRequests: 35}, codes, "httplimit")
			viaHTTP := scripts(t, a) - before
			t.Logf("scripts for 40 requests: %d through Multi, %d through httplimit", viaMulti, viaHTTP)
			require.LessOrEqual(t, viaHTTP, int64(10), "scripts for 40 HTTP requests")
		})
	}
}

// events counts what an observer saw.
type events struct {
	mu         sync.Mutex
	all, peeks int
	byName     map[string]int
}

func (e *events) Observe(_ context.Context, ev ratelimit.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all++
	if ev.Op == ratelimit.OpPeek {
		e.peeks++
	}
	e.byName[ev.Name]++
}

// multiOneScript: three policies on three different keys of one server, 20
// requests through Multi: 20 scripts (one a request, atomic), and 60 events,
// none of them a peek. Before, keys apart took the peek-then-take path: 120
// scripts, 120 events of which 60 peeks. A denied request reports every
// policy's real quota, as the memory store does.
func multiOneScript(t *testing.T, addr string, newStore NewStore) {
	ctx, a := context.Background(), Admin(t, addr)
	store := newStore(t, addr)
	seen := &events{byName: map[string]int{}}
	pre := Prefix()
	var ls []*ratelimit.Limiter
	for i, limit := range []int{30, 12, 30} {
		ls = append(ls, Limiter(t, store, ratelimit.PerMinute(limit), pre, ratelimit.WithName(fmt.Sprint("p", i)), ratelimit.WithObserver(seen)))
	}
	m, err := ratelimit.NewMulti(ls...)
	require.NoError(t, err)
	before := scripts(t, a)
	var last ratelimit.MultiDecision
	for i := 0; i < 20; i++ {
		last, err = m.Allow(ctx, "ip:1", "token:2", "tenant:3")
		require.NoError(t, err)
		require.Equal(t, i < 12, last.Allowed, "request %d", i)
	}
	require.Equal(t, int64(20), scripts(t, a)-before, "one script a request")
	require.Equal(t, 60, seen.all, "each policy's decision observed once a request")
	require.Zero(t, seen.peeks, "no peeks")
	require.Equal(t, map[string]int{"p0": 20, "p1": 20, "p2": 20}, seen.byName)
	require.Equal(t, "p1", last.Name, "the policy that denies")
	for i, want := range []int{30 - 12, 0, 30 - 12} {
		d := last.Decisions[i]
		require.Equal(t, 12, d.Count, "policy %d's real count", i)
		require.Equal(t, want, d.Remaining, "policy %d's real remaining quota", i)
		require.True(t, d.ResetAt.After(d.At), "policy %d's real reset", i)
	}
}

// TakeAllAsMemory decides random batches of one to four requests (keys,
// prefixes, algorithms, costs and policies mixed, on a caller's clock that
// moves on and sometimes back) through the server's TakeAll and the memory
// store's, which passes the conformance kit: every outcome must be the
// same. The script decides a batch in one pass whose writes wait until
// every request is known to be admitted.
func TakeAllAsMemory(t *testing.T, kind testserver.Kind, newStore NewStore) {
	srv := testserver.Own(t, kind)
	store := newStore(t, srv.Addr)
	mem, err := memory.New(memory.WithSweepInterval(0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = mem.Close() })
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0x7a11))
	pre := Prefix()
	var rules []*backend.Rule
	for i, p := range []ratelimit.Policy{
		ratelimit.NewPolicy(ratelimit.SlidingWindow, 5, 100*time.Millisecond),
		ratelimit.NewPolicy(ratelimit.SlidingWindow, 3, time.Second),
		ratelimit.NewPolicy(ratelimit.FixedWindow, 4, 100*time.Millisecond),
		ratelimit.NewPolicy(ratelimit.FixedWindow, 6, time.Second),
		ratelimit.NewPolicy(ratelimit.SlidingWindowCounter, 5, 100*time.Millisecond),
		ratelimit.NewPolicy(ratelimit.SlidingWindowCounter, 3, time.Second),
		ratelimit.TokenBucket(5, 100*time.Millisecond, 4),
		ratelimit.TokenBucket(2, time.Second, 3),
	} {
		// Kept an hour: the server's TTLs run on real time, the requests
		// on a clock of the test's, which a busy machine leaves behind.
		rules = append(rules, ruleOf(t, fmt.Sprintf("%sr%d:", pre, i), p, time.Hour))
	}
	ctx, now := context.Background(), time.Now().UnixMicro()
	for step := 0; step < 3000; step++ {
		now += rng.Int64N(20_000) - 4_000
		n := 1 + rng.IntN(4)
		reqs := make([]backend.Request, 0, n)
		used := map[string]bool{}
		for len(reqs) < n {
			rule := rules[rng.IntN(len(rules))]
			key := fmt.Sprint("k", rng.IntN(3))
			if used[rule.Prefix()+key] {
				continue
			}
			used[rule.Prefix()+key] = true
			reqs = append(reqs, backend.Request{Rule: rule, Key: key, Cost: 1 + rng.Int64N(rule.MaxCost()), Now: now})
		}
		got, want := make([]backend.Outcome, n), make([]backend.Outcome, n)
		require.NoError(t, store.TakeAll(ctx, reqs, got), "step %d (seed %d)", step, seed)
		require.NoError(t, mem.TakeAll(ctx, reqs, want))
		for i := range reqs {
			require.Equal(t, want[i], got[i], "step %d, request %d of %d: %v on %s, cost %d (seed %d)", step, i, n, reqs[i].Rule, reqs[i].Key, reqs[i].Cost, seed)
		}
	}
}

// MultiApart: three policies on keys of three hash tags of a cluster (as
// per-IP, per-token and per-tenant limits are), through Multi. Each group
// is one script, the groups sent at once: a peek, then a take if every one
// would admit (rediscore.TakeApart). Each decision is observed once, none a
// peek, and a denial reports the quota every policy holds. Under 16
// concurrent callers nothing is admitted over any limit. Keys apart took
// Multi's one-by-one path: 2N round trips one after another, each peek
// observed as a decision.
func MultiApart(t *testing.T, addrs []string, newStore NewClusterStore) {
	ctx := context.Background()
	store := newStore(t, addrs)
	seen := &events{byName: map[string]int{}}
	pre := Prefix()
	keys := []string{"ip:1", "token:2", "tenant:3"}
	var ls []*ratelimit.Limiter
	for i, limit := range []int{30, 12, 30} {
		ls = append(ls, Limiter(t, store, ratelimit.PerMinute(limit), pre, ratelimit.WithName(fmt.Sprint("p", i)), ratelimit.WithObserver(seen), clusterBudget))
	}
	m, err := ratelimit.NewMulti(ls...)
	require.NoError(t, err)
	var last ratelimit.MultiDecision
	for i := 0; i < 20; i++ {
		last, err = m.Allow(ctx, keys...)
		require.NoError(t, err)
		require.Equal(t, i < 12, last.Allowed, "request %d", i)
	}
	require.Equal(t, 60, seen.all, "each policy's decision observed once a request")
	require.Zero(t, seen.peeks, "no peeks")
	require.Equal(t, "p1", last.Name, "the policy that denies")
	for i, want := range []int{30 - 12, 0, 30 - 12} {
		d := last.Decisions[i]
		require.Equal(t, 12, d.Count, "policy %d's real count", i)
		require.Equal(t, want, d.Remaining, "policy %d's real remaining quota", i)
	}

	// Concurrent callers: the per-token limit (30) binds; races between
	// the two steps may count a denied request against per-IP (50), never
	// admit one over a limit.
	perIP := Limiter(t, store, ratelimit.PerMinute(50), pre+"race-ip:", clusterBudget)
	perToken := Limiter(t, store, ratelimit.PerMinute(30), pre+"race-token:", clusterBudget)
	race, err := ratelimit.NewMulti(perIP, perToken)
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				d, err := race.Allow(ctx, "10.0.0.1", "token-7")
				if !assert.NoError(t, err) {
					return
				}
				if d.Allowed {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	ip, err := perIP.Peek(ctx, "10.0.0.1")
	require.NoError(t, err)
	token, err := perToken.Peek(ctx, "token-7")
	require.NoError(t, err)
	t.Logf("160 requests from 16 callers: %d admitted; per-IP counts %d, per-token %d", admitted, ip.Count, token.Count)
	require.LessOrEqual(t, admitted, 30, "never over the per-token limit")
	require.Equal(t, admitted, token.Count, "per-token counts what it admitted")
	require.GreaterOrEqual(t, ip.Count, admitted, "per-IP counts every admission (and any request a race denied)")
	require.LessOrEqual(t, ip.Count, 50)
}
