package main

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	sethvargo "github.com/sethvargo/go-limiter/memorystore"
	ulule "github.com/ulule/limiter/v3"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
	uluredis "github.com/ulule/limiter/v3/drivers/store/redis"
	vk "github.com/valkey-io/valkey-go"
	"golang.org/x/time/rate"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/backend/redis"
	"github.com/ratelimit-go/ratelimit/backend/valkey"
)

// A contender is one limiter under test, opened fresh for a run: allow asks
// for one request of key and says whether it was admitted.
type contender struct {
	name  string
	allow func(ctx context.Context, key string) (bool, error)
	close func()
}

// A maker opens a contender enforcing limit per window on every key; ns
// namespaces its keys on a shared server, so that runs never see each
// other's state.
type maker struct {
	name string
	peer bool // false: this library
	open func(limit int, window time.Duration, ns string) (contender, error)
	// limitless marks a floor row that limits nothing (a script of return
	// 1): it admits every request.
	limitless bool
}

// budget is the time budget of this library's calls in the bench: far
// above a loaded machine's latency, as the peers have none. The bench
// measures speed, not the budget, and a call that timed out on a busy
// machine (the default is 100ms) once failed its warm-up; a budget costs
// the same whatever its length.
const budget = 10 * time.Second

// ours is this library on store (fresh for each open) under alg. It is
// not inlined, so that its closure calls Allow as a user's function
// does: Go inlines Allow into a closure, but not into the clone of a closure
// that inlining ours into its caller makes (the call then returns the
// Decision through memory, a copy more).
//
//go:noinline
func ours(name string, alg ratelimit.Algorithm, store func() (backend.Store, func(), error), opts ...ratelimit.Option) maker {
	return maker{name: name, open: func(limit int, window time.Duration, ns string) (contender, error) {
		s, closeStore, err := store()
		if err != nil {
			return contender{}, err
		}
		opts := append([]ratelimit.Option{ratelimit.WithPrefix(ns), ratelimit.WithTimeout(budget)}, opts...)
		l, err := ratelimit.New(s, ratelimit.NewPolicy(alg, limit, window), opts...)
		if err != nil {
			closeStore()
			return contender{}, err
		}
		return contender{close: closeStore, allow: func(ctx context.Context, key string) (bool, error) {
			d, err := l.Allow(ctx, key)
			return d.Allowed, err
		}}, nil
	}}
}

// memoryMakers are the in-process limiters: this library's memory store
// under each algorithm, the peers' in-memory stores, and six floor rows
// (floor.go, floordecision.go, floorduties.go, floorlog.go).
func memoryMakers() []maker {
	newMemory := func() (backend.Store, func(), error) {
		s, err := memory.New()
		if err != nil {
			return nil, nil, err
		}
		return s, func() { _ = s.Close() }, nil
	}
	var ms []maker
	for _, alg := range backend.Algorithms() {
		ms = append(ms, ours("ratelimit memory "+alg.String(), alg, newMemory))
	}
	return append(ms,
		maker{name: "sethvargo/go-limiter memorystore", peer: true, open: openSethvargo},
		maker{name: "x/time/rate in a map", peer: true, open: openXTimeRate},
		maker{name: "ulule/limiter memory", peer: true, open: openUluleMemory},
		memoryFloor(),
		casFloor(),
		keyLockFloor(),
		decisionFloor(),
		dutiesFloor(),
		logFloor(),
	)
}

func openSethvargo(limit int, window time.Duration, _ string) (contender, error) {
	s, err := sethvargo.New(&sethvargo.Config{Tokens: uint64(limit), Interval: window})
	if err != nil {
		return contender{}, err
	}
	return contender{close: func() { _ = s.Close(context.Background()) }, allow: func(ctx context.Context, key string) (bool, error) {
		_, _, _, ok, err := s.Take(ctx, key)
		return ok, err
	}}, nil
}

// openXTimeRate is what many services write by hand: a token bucket of
// golang.org/x/time/rate per key, in a map under a read-write lock (looked
// up under the read lock; created under the write lock). It never forgets a
// key, so it is unbounded, unlike every other contender.
func openXTimeRate(limit int, window time.Duration, _ string) (contender, error) {
	var mu sync.RWMutex
	buckets := map[string]*rate.Limiter{}
	every := rate.Every(window / time.Duration(limit))
	return contender{close: func() {}, allow: func(_ context.Context, key string) (bool, error) {
		mu.RLock()
		b, ok := buckets[key]
		mu.RUnlock()
		if !ok {
			mu.Lock()
			if b, ok = buckets[key]; !ok {
				b = rate.NewLimiter(every, limit)
				buckets[key] = b
			}
			mu.Unlock()
		}
		return b.Allow(), nil
	}}, nil
}

func openUluleMemory(limit int, window time.Duration, ns string) (contender, error) {
	l := ulule.New(ululememory.NewStoreWithOptions(ulule.StoreOptions{Prefix: ns, CleanUpInterval: time.Minute}),
		ulule.Rate{Period: window, Limit: int64(limit)})
	return contender{close: func() {}, allow: func(ctx context.Context, key string) (bool, error) {
		c, err := l.Get(ctx, key)
		return !c.Reached, err
	}}, nil
}

// floor is a reference row, not a limiter: a script called by EVALSHA per
// decision, whose reply is a count admitted while at most the limit. Its
// server time per decision is the floor the others are read against.
func floor(name, text string, limitless bool) maker {
	lua := goredis.NewScript(text)
	return maker{name: name, peer: true, limitless: limitless, open: func(limit int, window time.Duration, ns string) (contender, error) {
		c := goredis.NewClient(&goredis.Options{Addr: floorAddr, PoolSize: 64 * runtime.GOMAXPROCS(0), ContextTimeoutEnabled: true})
		return contender{close: func() { _ = c.Close() }, allow: func(ctx context.Context, key string) (bool, error) {
			n, err := lua.Run(ctx, c, []string{ns + key}, window.Milliseconds(), limit).Int64()
			return n <= int64(limit), err
		}}, nil
	}}
}

// sortedSetLog is the sorted-set log of the articles behind this project,
// at its least: prune what left the window, count, add a unique member
// (this process's sequence) when under the limit, renew the TTL. The floor under an exact log whose
// limit is too long for a string (lua's short_log).
const sortedSetLog = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= limit then return 0 end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('PEXPIRE', KEYS[1], math.floor(window / 1000) + 1000)
return 1`

// sortedSetFloor is a reference row (see floor) deciding by sortedSetLog.
func sortedSetFloor() maker {
	lua := goredis.NewScript(sortedSetLog)
	var seq atomic.Int64
	return maker{name: "floor: a sorted-set log (ZREMRANGEBYSCORE, ZCARD, ZADD, PEXPIRE)", peer: true, open: func(limit int, window time.Duration, ns string) (contender, error) {
		c := goredis.NewClient(&goredis.Options{Addr: floorAddr, PoolSize: 64 * runtime.GOMAXPROCS(0), ContextTimeoutEnabled: true})
		return contender{close: func() { _ = c.Close() }, allow: func(ctx context.Context, key string) (bool, error) {
			n, err := lua.Run(ctx, c, []string{ns + key}, window.Microseconds(), limit, seq.Add(1)).Int64()
			return n == 1, err
		}}, nil
	}}
}

// floorAddr is the server of the floor rows (networkMakers sets it).
var floorAddr string

// networkMakers are the limiters on the server at addr: this library's
// Redis (go-redis, and go-redis auto-pipelined: WithAutoPipeline) and Valkey
// (valkey-go) backends under each algorithm, and
// the peers' Redis stores, every one with 64 connections per CPU at most.
func networkMakers(addr string, conns int) []maker {
	floorAddr = addr
	newGoRedis := func() *goredis.Client {
		return goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: conns, ContextTimeoutEnabled: true})
	}
	var ms []maker
	for _, alg := range backend.Algorithms() {
		ms = append(ms, ours("ratelimit redis "+alg.String(), alg, func() (backend.Store, func(), error) {
			c := newGoRedis()
			s, err := redis.New(c)
			return s, func() { _ = c.Close() }, err
		}))
	}
	for _, alg := range backend.Algorithms() {
		ms = append(ms, ours("ratelimit redis pipelined "+alg.String(), alg, func() (backend.Store, func(), error) {
			c := newGoRedis()
			s, err := redis.New(c, redis.WithAutoPipeline(nil))
			return s, func() { _ = c.Close() }, err
		}))
	}
	// The caller's clock (WithCallerClock) spares each script the server's
	// TIME: what the default's exactness across instances costs the server.
	for _, alg := range backend.Algorithms() {
		ms = append(ms, ours("ratelimit redis caller clock "+alg.String(), alg, func() (backend.Store, func(), error) {
			c := newGoRedis()
			s, err := redis.New(c)
			return s, func() { _ = c.Close() }, err
		}, ratelimit.WithCallerClock(time.Now)))
	}
	for _, alg := range backend.Algorithms() {
		ms = append(ms, ours("ratelimit valkey "+alg.String(), alg, func() (backend.Store, func(), error) {
			c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true, MaxFlushDelay: 50 * time.Microsecond})
			if err != nil {
				return nil, nil, err
			}
			s, err := valkey.New(c)
			return s, c.Close, err
		}))
	}
	return append(ms,
		maker{name: "go-redis/redis_rate (GCRA)", peer: true, open: func(limit int, window time.Duration, ns string) (contender, error) {
			c := newGoRedis()
			l := redis_rate.NewLimiter(c)
			lim := redis_rate.Limit{Rate: limit, Burst: limit, Period: window}
			return contender{close: func() { _ = c.Close() }, allow: func(ctx context.Context, key string) (bool, error) {
				res, err := l.Allow(ctx, ns+key, lim)
				if err != nil {
					return false, err
				}
				return res.Allowed > 0, nil
			}}, nil
		}},
		floor("floor: a script of return 1", "return 1", true),
		floor("floor: a minimal fixed window (INCR, PEXPIRE)", minimalFixed, false),
		floor("floor: a fixed window on the server's clock (TIME, GET, SET)", timedFixed, false),
		sortedSetFloor(),
		maker{name: "ulule/limiter redis", peer: true, open: func(limit int, window time.Duration, ns string) (contender, error) {
			c := newGoRedis()
			s, err := uluredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: ns, MaxRetry: 3})
			if err != nil {
				_ = c.Close()
				return contender{}, err
			}
			l := ulule.New(s, ulule.Rate{Period: window, Limit: int64(limit)})
			return contender{close: func() { _ = c.Close() }, allow: func(ctx context.Context, key string) (bool, error) {
				lc, err := l.Get(ctx, key)
				return !lc.Reached, err
			}}, nil
		}},
	)
}
