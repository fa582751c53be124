// Package storetest holds the reliability checks that need a real server,
// shared by the Redis and Valkey backends: faults under load, bad input,
// floods and clock skew, verified on the server itself.
package storetest

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// NewStore returns a store on a new client of the server at addr.
type NewStore func(t *testing.T, addr string) backend.Store

// Run runs every check; addr is the package's shared server and kind says
// which binaries can start a server of its own for the fault checks.
func Run(t *testing.T, kind testserver.Kind, addr string, newStore NewStore) {
	t.Run("survives the server stopping and restarting under load", func(t *testing.T) { faults(t, kind, newStore) })
	t.Run("the time budget holds while the server is stalled", func(t *testing.T) { stalled(t, kind, newStore) })
	t.Run("a decision that timed out is not retried, so it counts at most once", func(t *testing.T) {
		NotRetried(t, kind, newStore, ratelimit.DefaultTimeout)
	})
	t.Run("a decision whose reply was lost is not sent again", func(t *testing.T) { NotRetriedOnABrokenConnection(t, kind, newStore) })
	t.Run("recovers from SCRIPT FLUSH and FUNCTION FLUSH, counting each request once", func(t *testing.T) { scriptFlushed(t, addr, newStore) })
	t.Run("SCRIPT FLUSH and FUNCTION FLUSH under load reach no caller", func(t *testing.T) { scriptFlush(t, addr, newStore) })
	t.Run("a slow server does not hold a caller past its deadline", func(t *testing.T) { SlowServer(t, addr, newStore(t, addr)) })
	t.Run("bad input stores nothing on the server", func(t *testing.T) { badInput(t, addr, newStore) })
	t.Run("a flood of denied requests keeps limit entries", func(t *testing.T) { flood(t, addr, newStore) })
	t.Run("instances with skewed clocks share one limit on the server clock", func(t *testing.T) { clockSkew(t, addr, newStore) })
	t.Run("the server's clock, estimated, spares the scripts their TIME", func(t *testing.T) { estimatedClock(t, addr, newStore) })
	t.Run("a longer window within the retention finds the history the old TTL would have dropped", func(t *testing.T) { history(t, addr, newStore) })
	t.Run("the largest decision keeps the server answering others", func(t *testing.T) { largestDecision(t, addr, newStore) })
	ScriptsEnd(t, kind, newStore)
	Logs(t, kind, newStore)
	t.Run("a take on a log whose entries all left the window", func(t *testing.T) { StaleTakes(t, kind, newStore) })
	t.Run("a short log's denials", func(t *testing.T) { ShortDenials(t, kind, newStore) })
}

// PrefixesOnACluster requires store, on a client of a real cluster, to keep
// prefixes holding braces apart from the hash tag: "x{}:" once split a key's
// server keys over two slots (go-redis: CROSSSLOT on every sliding decision;
// valkey-go: a panic in the caller's goroutine).
func PrefixesOnACluster(t *testing.T, store backend.Store) {
	ctx := context.Background()
	for _, prefix := range []string{"x{}:", "{tenant}:", "a}{b:"} {
		for _, alg := range backend.Algorithms() {
			l := Limiter(t, store, ratelimit.NewPolicy(alg, 2, time.Hour), prefix, clusterBudget)
			require.NoError(t, l.Reset(ctx, "user"))
			for i := 1; i <= 3; i++ {
				d, err := l.Allow(ctx, "user")
				require.NoError(t, err, "prefix %q, %v", prefix, alg)
				require.Equal(t, min(i, 2), d.Count, "prefix %q, %v", prefix, alg)
			}
			for _, k := range keysOf(t, prefix, "user", l.Policy()) {
				require.Equal(t, "user", lua.HashTag(k), "prefix %q: the caller's key is the hash tag of %q", prefix, k)
			}
		}
	}
}

// Admin is a plain client of the server at addr, closed after t (Redis
// and Valkey speak one protocol).
func Admin(t *testing.T, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// clusterBudget is the time budget of tests of where keys go on a cluster,
// not of time: a new cluster client's first call learns the cluster's
// layout, which the default budget may not cover on a loaded machine.
var clusterBudget = ratelimit.WithTimeout(correctnessBudget)

// correctnessBudget is the time budget of checks of what a store decides.
const correctnessBudget = 10 * time.Second

// Limiter is a Limiter of p on s under prefix. Its time budget is a
// generous correctness budget: the checks of a store's answers must not
// fail for a loaded machine's slow call; a check of the budget itself sets
// its own (WithTimeout in opts, which comes later and wins).
func Limiter(t *testing.T, s backend.Store, p ratelimit.Policy, prefix string, opts ...ratelimit.Option) *ratelimit.Limiter {
	l, err := ratelimit.New(s, p, append([]ratelimit.Option{ratelimit.WithPrefix(prefix), ratelimit.WithTimeout(correctnessBudget)}, opts...)...)
	require.NoError(t, err)
	return l
}

// Prefix is a namespace no other check has used.
func Prefix() string { return fmt.Sprintf("storetest:%d:", time.Now().UnixNano()) }

// failurePolicy, with the server down: a Limiter fails closed by default (the
// caller gets the error) and open when asked (the caller gets an admission
// that says so, without an error); either way the observer sees the error.
func failurePolicy(t *testing.T, store backend.Store) {
	for _, open := range []bool{false, true} {
		var observed atomic.Value
		opts := []ratelimit.Option{ratelimit.WithObserver(ratelimit.ObserverFunc(func(_ context.Context, e ratelimit.Event) {
			observed.Store(e)
		}))}
		if open {
			opts = append(opts, ratelimit.WithFailOpen())
		}
		l := Limiter(t, store, ratelimit.PerMinute(10), "down:", opts...)
		ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
		d, err := l.Allow(ctx, "user")
		cancel()
		if open {
			require.NoError(t, err, "a failure mode's decision is an answer")
			require.True(t, d.Allowed)
			require.Equal(t, ratelimit.SourceFailOpen, d.Source)
		} else {
			require.ErrorIs(t, err, ratelimit.ErrStore, "failing closed, the error is returned")
			require.Equal(t, ratelimit.Decision{}, d)
		}
		e, _ := observed.Load().(ratelimit.Event)
		require.ErrorIs(t, e.Err, ratelimit.ErrStore, "fail open %v: the observer saw the error", open)
	}
}

func scriptFlushed(t *testing.T, addr string, newStore NewStore) {
	a := Admin(t, addr)
	ctx := context.Background()
	for _, alg := range []ratelimit.Algorithm{ratelimit.SlidingWindow, ratelimit.FixedWindow} {
		// An hour: the three calls do not straddle a fixed window's end.
		l := Limiter(t, newStore(t, addr), ratelimit.NewPolicy(alg, 10, time.Hour), Prefix())
		for i := 1; i <= 3; i++ {
			require.NoError(t, a.ScriptFlush(ctx).Err())
			require.NoError(t, a.FunctionFlush(ctx).Err())
			d, err := l.Allow(ctx, "user")
			require.NoError(t, err, "%v: call %d after SCRIPT FLUSH and FUNCTION FLUSH", alg, i)
			require.Equal(t, i, d.Count, "%v: counted once", alg)
		}
	}
}

func scriptFlush(t *testing.T, addr string, newStore NewStore) {
	// A generous budget: the property is that NOSCRIPT never reaches a
	// caller, not how fast a loaded machine answers.
	l := Limiter(t, newStore(t, addr), ratelimit.PerSecond(ratelimit.MaxLogLimit), Prefix())
	a := Admin(t, addr)
	ld := startLoad(l, correctnessBudget)
	for i := 0; i < 10; i++ {
		time.Sleep(20 * time.Millisecond)
		require.NoError(t, a.ScriptFlush(context.Background()).Err())
		time.Sleep(20 * time.Millisecond)
		require.NoError(t, a.FunctionFlush(context.Background()).Err())
	}
	ld.finish()
	require.Zero(t, ld.failures.Load(), "errors from %d calls across 10 SCRIPT FLUSH and FUNCTION FLUSH; the first: %v", ld.calls.Load(), ld.firstErr.Load())
}

// keysUnder lists the server's keys under prefix.
func keysUnder(t *testing.T, a *goredis.Client, prefix string) []string {
	var keys []string
	iter := a.Scan(context.Background(), 0, prefix+"*", 1000).Iterator()
	for iter.Next(context.Background()) {
		keys = append(keys, iter.Val())
	}
	require.NoError(t, iter.Err())
	return keys
}

func badInput(t *testing.T, addr string, newStore NewStore) {
	ctx := context.Background()
	a := Admin(t, addr)
	pre := Prefix()
	l := Limiter(t, newStore(t, addr), ratelimit.PerMinute(3), pre)
	var nilCtx context.Context
	rejected := []struct {
		name string
		err  error
		want error
	}{
		{"empty key", second(l.Allow(ctx, "")), ratelimit.ErrInvalidKey},
		{"key over MaxKeyLen", second(l.Allow(ctx, strings.Repeat("k", ratelimit.MaxKeyLen+1))), ratelimit.ErrInvalidKey},
		{"n = 0", second(l.AllowN(ctx, "user", 0)), ratelimit.ErrInvalidCost},
		{"n < 0", second(l.AllowN(ctx, "user", -5)), ratelimit.ErrInvalidCost},
		{"n > limit", second(l.AllowN(ctx, "user", 4)), ratelimit.ErrInvalidCost},
		{"nil context", second(l.Allow(nilCtx, "user")), ratelimit.ErrInvalidArgument},
		{"reset of an empty key", l.Reset(ctx, ""), ratelimit.ErrInvalidKey},
		{"limit 0", l.SetPolicy(ratelimit.Policy{Limit: 0, Window: time.Second}), ratelimit.ErrInvalidPolicy},
		{"negative limit", l.SetPolicy(ratelimit.Policy{Limit: -1, Window: time.Second}), ratelimit.ErrInvalidPolicy},
		{"window 0", l.SetPolicy(ratelimit.Policy{Limit: 1}), ratelimit.ErrInvalidPolicy},
		{"negative window", l.SetPolicy(ratelimit.Policy{Limit: 1, Window: -time.Second}), ratelimit.ErrInvalidPolicy},
		{"sub-millisecond window", l.SetPolicy(ratelimit.Policy{Limit: 1, Window: 999 * time.Microsecond}), ratelimit.ErrInvalidPolicy},
		{"unknown algorithm", l.SetPolicy(ratelimit.Policy{Limit: 1, Window: time.Second, Algorithm: 7}), ratelimit.ErrInvalidPolicy},
		{"prefix over MaxPrefixLen", second(ratelimit.New(newStore(t, addr), ratelimit.PerMinute(1), ratelimit.WithPrefix(pre+strings.Repeat("p", ratelimit.MaxPrefixLen)))), ratelimit.ErrInvalidKey},
	}
	for _, r := range rejected {
		require.ErrorIs(t, r.err, r.want, r.name)
	}
	_, err := ratelimit.New(nil, ratelimit.PerMinute(1))
	require.ErrorIs(t, err, ratelimit.ErrInvalidArgument, "nil store")
	require.Empty(t, keysUnder(t, a, pre), "rejected calls stored nothing")

	// Keys that are unusual but valid work, each under its own server keys.
	odd := []string{"{", "}", "{x}", "a b", "line\nbreak", "nul\x00", "\xff\xfe invalid UTF-8", "*", "?[]", strings.Repeat("k", ratelimit.MaxKeyLen)}
	for _, k := range odd {
		d, err := l.Allow(ctx, k)
		require.NoError(t, err, "%q", k)
		require.Equal(t, 1, d.Count, "%q", k)
	}
	want := 0
	for _, k := range odd {
		want += len(storedKeysOf(t, pre, k, l.Policy()))
	}
	require.Len(t, keysUnder(t, a, pre), want, "the keys of each one's state")
	for _, k := range odd {
		for _, sk := range storedKeysOf(t, pre, k, l.Policy()) {
			require.EqualValues(t, 1, a.Exists(ctx, sk).Val(), "%q is stored at %q", k, sk)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func flood(t *testing.T, addr string, newStore NewStore) {
	ctx := context.Background()
	a := Admin(t, addr)
	for _, p := range []ratelimit.Policy{ratelimit.PerHour(50), ratelimit.PerHour(lua.ShortLog + 72), ratelimit.NewPolicy(ratelimit.FixedWindow, 50, time.Hour)} {
		pre, limit := Prefix(), p.Limit
		l := Limiter(t, newStore(t, addr), p, pre)
		for i := 0; i < 2000; i++ {
			_, err := l.Allow(ctx, "abuser")
			require.NoError(t, err)
		}
		keys := keysOf(t, pre, "abuser", l.Policy())
		if p.Algorithm == ratelimit.SlidingWindow {
			require.EqualValues(t, limit, logEntries(t, a, keys, limit), "entries after 2000 requests at limit %d", limit)
		} else {
			require.EqualValues(t, limit, fixedCount(t, a, keys), "the counter after 2000 requests")
		}
	}
}

// fixedCount is the count a fixed window's state holds (keys: its one key;
// see script/keys.go).
func fixedCount(t *testing.T, a *goredis.Client, keys []string) float64 {
	packed, err := a.Get(context.Background(), keys[0]).Bytes()
	require.NoError(t, err)
	require.Len(t, packed, 16, "the doubles start and count")
	return math.Float64frombits(binary.LittleEndian.Uint64(packed[8:]))
}

// clockSkew: two app instances whose clocks are 5s apart. On the server's
// clock (the default) they share one limit, whatever their clocks say; the
// same instances sending their own clocks (WithCallerClock) over-admit, which is
// why the server clock is the default.
func clockSkew(t *testing.T, addr string, newStore NewStore) {
	ctx := context.Background()
	const limit, skew = 10, 5 * time.Second
	p := ratelimit.Policy{Limit: limit, Window: 2 * time.Second}
	ahead := func() time.Time { return time.Now().Add(skew) }
	behind := time.Now

	pre := Prefix()
	// What each instance's clock says is recorded, and must not be sent.
	var sent atomic.Int64
	spy := func(s backend.Store) backend.Store { return &timeSpy{Store: s, sent: &sent} }
	a := Limiter(t, spy(newStore(t, addr)), p, pre)
	b := Limiter(t, spy(newStore(t, addr)), p, pre)
	admitted := 0
	for i := 0; i < 2*limit; i++ {
		l := a
		if i%2 == 1 {
			l = b
		}
		d, err := l.Allow(ctx, "user")
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		}
	}
	require.Equal(t, limit, admitted, "two instances on the server clock share one limit")
	require.Zero(t, sent.Load(), "no client time is sent on the server clock")

	pre = Prefix()
	a = Limiter(t, newStore(t, addr), p, pre, ratelimit.WithCallerClock(ahead))
	b = Limiter(t, newStore(t, addr), p, pre, ratelimit.WithCallerClock(behind))
	admitted = 0
	for _, l := range []*ratelimit.Limiter{b, a} { // the slow clock first, then the fast one
		for i := 0; i < limit; i++ {
			d, err := l.Allow(ctx, "user")
			require.NoError(t, err)
			if d.Allowed {
				admitted++
			}
		}
	}
	require.Equal(t, 2*limit, admitted, "client clocks 5s apart admit twice the limit within a moment: the documented hazard of WithCallerClock")
}

// timeSpy counts requests that carry a client time.
type timeSpy struct {
	backend.Store
	sent *atomic.Int64
}

func (s *timeSpy) Take(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	if req.Now != 0 {
		s.sent.Add(1)
	}
	return s.Store.Take(ctx, req)
}

// ruleOf is p compiled for keys under prefix, kept for retain.
func ruleOf(t testing.TB, prefix string, p ratelimit.Policy, retain time.Duration) *backend.Rule {
	t.Helper()
	r, err := backend.NewRule(p.Algorithm, int64(p.Limit), p.Window, int64(p.Burst), max(retain, p.Window), prefix)
	require.NoError(t, err)
	return r
}

// keysOf are the server keys of key's state under prefix and p.
func keysOf(t testing.TB, prefix, key string, p ratelimit.Policy) []string {
	return lua.Keys(backend.Request{Rule: ruleOf(t, prefix, p, p.Window), Key: key, Cost: 1})
}

// storedKeysOf are the keys of keysOf that hold the state once it has some.
func storedKeysOf(t testing.TB, prefix, key string, p ratelimit.Policy) []string {
	return lua.StoredKeys(backend.Request{Rule: ruleOf(t, prefix, p, p.Window), Key: key, Cost: 1})
}

// logEntries is how many entries (units, in a short log) the sliding log
// under keys holds: a short log's string length, less its header, over 8;
// a sorted set's ZCARD (lua/keys.go).
func logEntries(t testing.TB, a *goredis.Client, keys []string, limit int) int64 {
	ctx := context.Background()
	if limit <= lua.ShortLog {
		n, err := a.StrLen(ctx, keys[0]).Result()
		require.NoError(t, err)
		require.Zero(t, n%8, "a short log holds whole units")
		return max(n/8-2, 0)
	}
	return a.ZCard(ctx, keys[0]).Val()
}

// Main is the TestMain of a package whose tests stop servers on purpose:
// go-redis's own log lines ("connection pool: failed to dial" and the like)
// say nothing the tests do not, and once buried a run's FAIL lines (99 of
// 143 lines), so they are silenced; then testserver.Main.
func Main(m *testing.M) {
	goredis.SetLogger(silent{})
	testserver.Main(m)
}

type silent struct{}

func (silent) Printf(context.Context, string, ...any) {}
