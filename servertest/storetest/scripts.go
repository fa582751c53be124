package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
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

// ScriptsEnd holds the checks that no decision can hold a shared server:
// a script runs alone on it, so one that never ends answers every other
// client BUSY until someone kills it.
func ScriptsEnd(t *testing.T, kind testserver.Kind, newStore NewStore) {
	t.Run("a caller's clock before the epoch is refused and the server keeps answering", func(t *testing.T) {
		beforeEpoch(t, kind, newStore)
	})
	t.Run("every script ends, whatever the state and arguments", func(t *testing.T) { fuzzScripts(t, kind) })
	t.Run("state written by hand is no state: the key heals, never over-admits", func(t *testing.T) { CorruptState(t, kind) })
}

// beforeEpoch replays what a fuzz of the public API found: on a sliding log,
// a caller's clock before 1970 made the meta's "oldest entry unknown" (then
// 0) pass for a real entry, and the retry-after search never ended: the
// server answered nobody else for minutes. Such a time is now refused
// before any I/O, and the server answers PING afterwards.
func beforeEpoch(t *testing.T, kind testserver.Kind, newStore NewStore) {
	srv := testserver.Own(t, kind) // a server of its own: a stuck one would fail every other test
	var mu sync.Mutex
	at := time.Unix(0, 0).Add(-2 * time.Second) // then -0.5s: the first entries are stale, and were not pruned
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
	l := Limiter(t, newStore(t, srv.Addr), ratelimit.PerSecond(10), Prefix(), ratelimit.WithCallerClock(clock),
		ratelimit.WithTimeout(time.Second))
	ctx := context.Background()
	setClock := func(d time.Duration) { mu.Lock(); at = time.Unix(0, 0).Add(d); mu.Unlock() }
	steps := []struct {
		name string
		call func() error
	}{
		{"AllowN(5)", func() error { return second(l.AllowN(ctx, "k", 5)) }},
		{"AllowN(1)", func() error { return second(l.AllowN(ctx, "k", 1)) }},
		{"Refund(1)", func() error { return second(l.Refund(ctx, "k", 1)) }},
		{"AllowN(2) at -0.5s", func() error { setClock(-500 * time.Millisecond); return second(l.AllowN(ctx, "k", 2)) }},
		{"AllowN(6)", func() error { return second(l.AllowN(ctx, "k", 6)) }},
	}
	errs := make([]error, len(steps))
	for i, s := range steps {
		errs[i] = s.call()
	}
	requireAnswers(t, srv.Addr)
	for i, s := range steps {
		require.ErrorIs(t, errs[i], ratelimit.ErrInvalidArgument, "%s: a time before the epoch", s.name)
		require.NotErrorIs(t, errs[i], ratelimit.ErrStore, "%s: refused before any I/O", s.name)
	}
}

// requireAnswers fails unless the server at addr answers PING from a client
// of its own: a server running a script that does not end answers nothing
// (and BUSY once the script has run for lua-time-limit). The deadline is
// generous: a loaded machine delays a PING, a stuck server never answers.
func requireAnswers(t *testing.T, addr string) {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	began := time.Now()
	err := c.Ping(ctx).Err()
	if err != nil {
		_ = c.Do(context.Background(), "SCRIPT", "KILL").Err() // free it for whatever runs next
	}
	require.NoError(t, err, "the server does not answer PING from another client (after %v): a script still runs", time.Since(began))
}

// fuzzScripts runs the script itself, through EVALSHA, on random keys with
// random prior state (written by earlier calls at random accepted times,
// extremes included: the epoch, MaxMicros, clocks that jump back; and 1 call
// in 15 by hand first: NaN, ±Inf, negatives, random bytes, wrong types in
// any field) and random arguments within what the stores
// accept: takes, peeks, refunds and charges, 1 in 4 through All (a
// TakeAll's, a PeekAll's, a ChargeAll's script). Each call must end: the client's
// deadline is far above any healthy call, and a pinger on another
// connection must be answered throughout. The slowest call's server time
// (SLOWLOG) is reported, and bounded by a few milliseconds plus the
// scheduling noise this process measured in the same run.
func fuzzScripts(t *testing.T, kind testserver.Kind) {
	srv := testserver.Own(t, kind)
	ctx := context.Background()
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	const slowMicros = 5000
	require.NoError(t, c.ConfigSet(ctx, "slowlog-log-slower-than", fmt.Sprint(slowMicros)).Err())
	require.NoError(t, c.ConfigSet(ctx, "slowlog-max-len", "1024").Err())
	require.NoError(t, c.SlowLogReset(ctx).Err())

	noise := testserver.StartNoise()
	pings := startPinger(srv.Addr)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	t.Logf("seed %d", seed)
	allArgs := lua.NewStringArgs()

	policies := []ratelimit.Policy{
		ratelimit.PerSecond(10),
		{Limit: 300, Window: time.Millisecond},
		{Limit: ratelimit.MaxLogLimit, Window: ratelimit.MaxWindow},
		ratelimit.NewPolicy(ratelimit.FixedWindow, 10, time.Second),
		ratelimit.NewPolicy(ratelimit.FixedWindow, ratelimit.MaxLimit, ratelimit.MaxWindow),
		ratelimit.NewPolicy(ratelimit.SlidingWindowCounter, 10, time.Second),
		ratelimit.NewPolicy(ratelimit.SlidingWindowCounter, ratelimit.MaxLimit, ratelimit.MaxWindow),
		ratelimit.NewPolicy(ratelimit.SlidingWindowCounter, 1, time.Millisecond),
		ratelimit.TokenBucket(10, time.Second, 20),
		ratelimit.TokenBucket(1, ratelimit.MaxWindow, 521), // the largest burst at that rate
		ratelimit.TokenBucket(7, 3*time.Millisecond, 1),
	}
	maxUs := backend.MaxMicros
	now := int64(0)
	nextTime := func(window int64) int64 {
		switch rng.IntN(10) {
		case 0:
			now = 0
		case 1:
			now = maxUs
		case 2:
			now = rng.Int64N(maxUs + 1)
		case 3, 4: // back, within a few windows
			now -= rng.Int64N(3*window + 1)
		default:
			now += rng.Int64N(window/2 + 1)
		}
		now = min(max(now, backend.MinMicros), maxUs)
		return now
	}
	const calls = 3000
	var errs []string
	for i := 0; i < calls; i++ {
		p := policies[rng.IntN(len(policies))]
		p.Window = p.Window.Truncate(time.Microsecond)
		cost := 1
		if rng.IntN(4) == 0 {
			cost = 1 + rng.IntN(p.MaxCost())
		}
		req := backend.Request{Rule: ruleOf(t, "fuzz:", p, ratelimit.MaxWindow), Key: fmt.Sprint("k", rng.IntN(4)), Cost: int64(cost),
			Now: nextTime(p.Window.Microseconds())}
		if rng.IntN(20) == 0 {
			req.Now = 0 // the server's clock
		}
		op := [...]lua.Op{lua.Take, lua.Peek, lua.Refund, lua.Charge}[rng.IntN(4)]
		require.NoError(t, req.Validate(), "the fuzz makes only requests a store accepts")
		keys := lua.Keys(req)
		if rng.IntN(15) == 0 { // state written by hand (CorruptState), where the key has some
			cs := corruptions(req, rng)
			_ = cs[rng.IntN(len(cs))].do(ctx, c, keys)
		}
		args := lua.Args(req, op)
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		script := lua.For(req.Rule.Algorithm()) // a request's own script, and 1 in 4 the one of TakeAll
		if rng.IntN(4) == 0 {
			script, args = lua.All, allArgs.ForAllOp([]backend.Request{req}, op)
		}
		err := eval(callCtx, c, script, keys, toAny(args)).Err()
		cancel()
		if err != nil {
			requireAnswers(t, srv.Addr)
			errs = append(errs, fmt.Sprintf("call %d: %v %v at %d, cost %d: %v", i, op, p, req.Now, cost, err))
			if len(errs) > 10 {
				break
			}
		}
	}
	pingErrs, pingN := pings.stop()
	late := noise.Stop()
	require.Empty(t, errs, "every call answers (seed %d)", seed)
	require.Zero(t, pingErrs.Load(), "PINGs from another client that failed during the fuzz, of %d (seed %d)", pingN, seed)

	slowest, _ := slowestScript(ctx, t, c)
	bound := slowMicros*time.Microsecond + late
	t.Logf("%d calls; slowest script over %dµs: %v (bound %v: %dµs plus this process's worst timer lateness); %d pings answered",
		calls, slowMicros, slowest, bound, slowMicros, pingN)
	require.LessOrEqual(t, slowest, bound, "a script's server time (seed %d)", seed)
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// pinger PINGs a server from a connection of its own until stopped.
type pinger struct {
	errs  atomic.Int64
	n     atomic.Int64
	quit  chan struct{}
	ended chan struct{}
}

func startPinger(addr string) *pinger {
	p := &pinger{quit: make(chan struct{}), ended: make(chan struct{})}
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	go func() {
		defer close(p.ended)
		defer c.Close()
		for {
			select {
			case <-p.quit:
				return
			case <-time.After(5 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := c.Ping(ctx).Err(); err != nil && !errors.Is(err, goredis.ErrClosed) {
				p.errs.Add(1)
			}
			cancel()
			p.n.Add(1)
		}
	}()
	return p
}

func (p *pinger) stop() (*atomic.Int64, int64) {
	close(p.quit)
	<-p.ended
	return &p.errs, p.n.Load()
}
