package storetest

import (
	"context"
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/servertest/serverinfo"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// StaleTakes checks the takes a long log decides on its meta alone. One
// on a log whose every entry has left the window (its entry goes in before
// the stale ones go): admitted with a count of its own cost, the log never
// emptied, so that its TTL stands on the server's clock; and exact when
// the log and its meta parted or the log is of another type. Takes on a
// log whose entries are all in the window: the meta kept exact. On a
// server of its own.
func StaleTakes(t *testing.T, kind testserver.Kind, newStore NewStore) {
	addr := testserver.Own(t, kind).Addr
	t.Run("the key's TTL stands", func(t *testing.T) { staleKeepsTTL(t, addr, newStore) })
	parted := map[string]func(ctx context.Context, a *goredis.Client, log string, old float64) error{
		"as it was": func(context.Context, *goredis.Client, string, float64) error { return nil },
		"3 entries lost": func(ctx context.Context, a *goredis.Client, log string, _ float64) error {
			return a.ZRemRangeByRank(ctx, log, 0, 2).Err()
		},
		"the log lost": func(ctx context.Context, a *goredis.Client, log string, _ float64) error {
			return a.Del(ctx, log).Err()
		},
		"5 entries more": func(ctx context.Context, a *goredis.Client, log string, old float64) error {
			for i := range 5 { // members 11 to 15: the ids the next takes propose (ZADD NX moves past them)
				if err := a.ZAdd(ctx, log, goredis.Z{Score: old - float64(i), Member: 11 + i}).Err(); err != nil {
					return err
				}
			}
			return nil
		},
		"the log a string": func(ctx context.Context, a *goredis.Client, log string, _ float64) error {
			return a.Set(ctx, log, "x", time.Hour).Err()
		},
		"the log a hash": func(ctx context.Context, a *goredis.Client, log string, _ float64) error {
			if err := a.Del(ctx, log).Err(); err != nil {
				return err
			}
			return a.HSet(ctx, log, "a", "1").Err()
		},
	}
	for name, part := range parted {
		t.Run("a stale log "+name, func(t *testing.T) { staleParted(t, addr, newStore, part) })
	}
	t.Run("a log of one entry: the entry re-timed", func(t *testing.T) { staleOneEntry(t, addr, newStore) })
	t.Run("takes in the window: the meta exact", func(t *testing.T) { freshTakes(t, addr, newStore) })
	t.Run("takes that prune some entries", func(t *testing.T) { prunedTakes(t, addr, newStore) })
}

// freshTakes: takes on a log whose entries are all in the window, of costs
// 1 and 3, leave the meta telling what the log holds (its entries, their
// units past one each, the newest and the oldest entry's times) after
// each take; each is the meta's GET, one ZADD and one SET, nothing read of
// the log; the limit's rest is admitted and the next unit denied.
func freshTakes(t *testing.T, addr string, newStore NewStore) {
	ctx := context.Background()
	c, l, a, keys := aLog(t, addr, newStore)
	first, units := c.now.Add(time.Millisecond), 0 // the first take's time
	take := func(i int) {
		t.Helper()
		cost := 1 + 2*(i%2)
		c.now = c.now.Add(time.Millisecond)
		d, err := l.AllowN(ctx, "k", cost)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		units += cost
		require.Equal(t, 200-units, d.Remaining)
		require.Equal(t, first.Add(time.Minute).UnixMicro(), d.ResetAt.UnixMicro(), "the window resets as the first take leaves")
	}
	for i := range 30 {
		take(i)
		e := a.ZRangeWithScores(ctx, keys[0], 0, -1).Val()
		extra := 0
		for _, z := range e {
			if _, n, ok := strings.Cut(z.Member.(string), ":"); ok {
				c, err := strconv.Atoi(n)
				require.NoError(t, err)
				extra += c - 1
			}
		}
		meta, err := a.Get(ctx, keys[1]).Bytes()
		require.NoError(t, err)
		require.Len(t, meta, 48)
		f := func(i int) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(meta[8*i:])) }
		require.Equal(t, [4]float64{float64(extra), e[len(e)-1].Score, e[0].Score, float64(len(e))}, [4]float64{f(1), f(2), f(3), f(5)},
			"take %d: the meta's x, t, o and c are the log's", i)
	}
	require.NoError(t, a.ConfigResetStat(ctx).Err())
	for i := range 10 {
		take(i)
	}
	calls, err := serverinfo.CommandCalls(ctx, a)
	require.NoError(t, err)
	// (and a PEXPIRE: on the caller's clock the keys' TTLs are renewed by
	// every take, as the script cannot tell how long they have left)
	require.Equal(t, [3]int64{10, 10, 10}, [3]int64{calls["get"], calls["zadd"], calls["set"]}, "a take: the meta's GET, a ZADD, a SET")
	for _, cmd := range []string{"zrange", "zcard", "zcount", "zrangebyscore", "zremrangebyscore", "type"} {
		require.Zero(t, calls[cmd], "no %s", cmd)
	}
	require.Equal(t, 200-units, admitAll(t, l, c, "k", 1, time.Millisecond), "the limit's rest")
}

// prunedTakes: a take on a log of five entries a millisecond apart, the
// two oldest out of the window, prunes them and counts the three left
// with its own, the window resetting as the oldest left leaves; and a log
// parted from its meta (entries in the window lost, or stale entries the
// meta does not count) still answers exactly: the take counts what the
// log holds, and the limit's rest is admitted.
func prunedTakes(t *testing.T, addr string, newStore NewStore) {
	ctx := context.Background()
	a := Admin(t, addr)
	for name, part := range map[string]func(log string, at time.Time) error{
		"as it was": func(string, time.Time) error { return nil },
		"the entries in the window lost": func(log string, at time.Time) error {
			return a.ZRemRangeByRank(ctx, log, 2, -1).Err()
		},
		"stale entries it does not count": func(log string, at time.Time) error {
			for i := range 4 {
				if err := a.ZAdd(ctx, log, goredis.Z{Score: float64(at.Add(-time.Hour).UnixMicro() + int64(i)), Member: 100 + i}).Err(); err != nil {
					return err
				}
			}
			return nil
		},
	} {
		c := &clockAt{time.Now()}
		l, pre := logLimiter(t, addr, newStore, ratelimit.PerMinute(200), c)
		keys := keysOf(t, pre, "k", l.Policy())
		times := make([]time.Time, 5)
		for i := range times {
			c.now = c.now.Add(time.Millisecond)
			times[i] = c.now
			d, err := l.Allow(ctx, "k")
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		require.NoError(t, part(keys[0], c.now), name)
		c.now = times[1].Add(time.Minute) // times[0] and times[1] leave the window
		d, err := l.Allow(ctx, "k")
		require.NoError(t, err, name)
		require.True(t, d.Allowed, name)
		held := a.ZCount(ctx, keys[0], strconv.FormatInt(c.now.Add(-time.Minute).UnixMicro()+1, 10), "+inf").Val()
		require.EqualValues(t, 200-held, d.Remaining, "%s: the count is the log's, its own take in", name)
		if name == "as it was" {
			require.EqualValues(t, 4, held)
			require.Equal(t, times[2].Add(time.Minute).UnixMicro(), d.ResetAt.UnixMicro(), "the window resets as the oldest left leaves")
			require.EqualValues(t, 4, a.ZCard(ctx, keys[0]).Val(), "the two stale entries pruned")
		}
		require.EqualValues(t, 200-held, admitAll(t, l, c, "k", 1, 0), "%s: the limit's rest", name)
	}
}

// staleOneEntry: a take of one unit on a log whose one entry (of one unit)
// has left the window re-times that entry, one ZADD with no prune; and any
// take on a sorted set is typed by its first command on the log, with no
// TYPE. Parted from its meta (the entry lost, or under another member), the
// log still answers exactly.
func staleOneEntry(t *testing.T, addr string, newStore NewStore) {
	ctx := context.Background()
	c := &clockAt{time.Now()}
	l, pre := logLimiter(t, addr, newStore, ratelimit.PerMinute(200), c)
	a := Admin(t, addr)
	keys := keysOf(t, pre, "k", l.Policy())
	take := func(wait time.Duration, remaining int) {
		t.Helper()
		c.now = c.now.Add(wait)
		d, err := l.Allow(ctx, "k")
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.Equal(t, remaining, d.Remaining)
	}
	take(0, 199)
	require.NoError(t, a.ConfigResetStat(ctx).Err())
	for range 10 {
		take(2*time.Minute, 199)
		e := a.ZRangeWithScores(ctx, keys[0], 0, -1).Val()
		require.Len(t, e, 1, "one entry")
		require.EqualValues(t, c.now.UnixMicro(), e[0].Score, "the entry is the take's")
	}
	for i := range 20 { // takes in the window
		take(time.Millisecond, 198-i)
	}
	calls, err := serverinfo.CommandCalls(ctx, a)
	require.NoError(t, err)
	require.EqualValues(t, 30, calls["zadd"], "a ZADD a take")
	require.Zero(t, calls["zremrangebyscore"], "no prune: the stale entry was re-timed, and none left the window after")
	require.Zero(t, calls["type"], "no TYPE: a take's first command on the log types it")

	// Two entries, the older out of the window: the take prunes it, and
	// the one left (the newer) is the oldest, read from the meta.
	c.now = c.now.Add(2 * time.Minute)
	take(0, 199)
	c.now = c.now.Add(30 * time.Second)
	newer := c.now
	take(0, 198)
	require.NoError(t, a.ConfigResetStat(ctx).Err())
	c.now = c.now.Add(45 * time.Second)
	d, err := l.Allow(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, 198, d.Remaining, "the newer and this take")
	require.Equal(t, newer.Add(time.Minute).UnixMicro(), d.ResetAt.UnixMicro(), "the window resets as the newer leaves")
	calls, err = serverinfo.CommandCalls(ctx, a)
	require.NoError(t, err)
	require.Equal(t, [2]int64{1, 0}, [2]int64{calls["zremrangebyscore"], calls["zrange"]}, "one prune, no read of the oldest left")

	for name, part := range map[string]func(log string) error{
		"lost": func(log string) error { return a.Del(ctx, log).Err() },
		"under another member": func(log string) error {
			return a.Eval(ctx, "local e = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES') redis.call('DEL', KEYS[1]) "+
				"return redis.call('ZADD', KEYS[1], e[2], 'x')", []string{log}).Err()
		},
	} {
		ks := keysOf(t, pre, name, l.Policy())
		c.now = c.now.Add(2 * time.Minute)
		d, err := l.Allow(ctx, name)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.NoError(t, part(ks[0]), name)
		c.now = c.now.Add(2 * time.Minute)
		d, err = l.Allow(ctx, name)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.Equal(t, 199, d.Remaining, "the entry %s: the take counts its own", name)
		require.Equal(t, 199, admitAll(t, l, c, name, 1, time.Millisecond), "the entry %s: the limit's rest", name)
	}
}

// staleKeepsTTL: a take on a stale log at the server's time leaves both
// keys' TTLs as they were (a take that emptied the log first renewed them:
// a PEXPIRE a call), and the next take's count starts from it.
func staleKeepsTTL(t *testing.T, addr string, newStore NewStore) {
	ctx := context.Background()
	pre := Prefix()
	p := ratelimit.NewPolicy(ratelimit.SlidingWindow, 200, 20*time.Millisecond)
	l := Limiter(t, newStore(t, addr), p, pre, ratelimit.WithRetention(time.Hour))
	a := Admin(t, addr)
	keys := keysOf(t, pre, "k", p)
	began := time.Now()
	d, err := l.Allow(ctx, "k")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	full := a.PTTL(ctx, keys[0]).Val()
	read := time.Now()
	require.Positive(t, full)
	for time.Since(read) < 50*time.Millisecond { // the entry leaves the window
		time.Sleep(10 * time.Millisecond)
	}
	d, err = l.Allow(ctx, "k")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, 199, d.Remaining, "the stale entry is not counted")
	// A TTL stands while it is longer than the retention: for the TTL
	// slack (1s) after its write. A machine that stalled this check
	// about as long sees it renewed, as designed.
	stood := time.Since(began) < backend.KeepSlack*9/10
	for i, k := range keys {
		ttl := a.PTTL(ctx, k).Val()
		require.Positive(t, ttl, "key %d keeps a TTL", i)
		if stood {
			require.LessOrEqual(t, ttl, full-40*time.Millisecond, "key %d: its TTL stood (renewed, it would be %v again)", i, full)
		} else {
			t.Logf("the two takes %v apart: the TTL may be renewed", time.Since(began))
		}
	}
	require.EqualValues(t, 1, a.ZCard(ctx, keys[0]).Val(), "the stale entry is pruned")
}

// staleParted: 10 requests of cost 2 recorded, a log parted from its meta
// by part, every entry then out of the window: the next take is admitted
// with its own cost counted, and the limit's rest admitted after it, on
// the caller's clock.
func staleParted(t *testing.T, addr string, newStore NewStore, part func(ctx context.Context, a *goredis.Client, log string, old float64) error) {
	ctx := context.Background()
	c, l, a, keys := aLog(t, addr, newStore)
	for range 10 {
		c.now = c.now.Add(time.Millisecond)
		d, err := l.AllowN(ctx, "k", 2)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	meta, err := a.Get(ctx, keys[1]).Bytes()
	require.NoError(t, err)
	require.Len(t, meta, 48)
	require.EqualValues(t, 10, math.Float64frombits(binary.LittleEndian.Uint64(meta[40:])), "the meta counts the entries")
	require.NoError(t, part(ctx, a, keys[0], float64(c.now.UnixMicro())))
	c.now = c.now.Add(2 * time.Minute)
	d, err := l.AllowN(ctx, "k", 3)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, 197, d.Remaining)
	require.Equal(t, 197, admitAll(t, l, c, "k", 1, time.Millisecond), "the limit's rest")
	require.EqualValues(t, 198, a.ZCard(ctx, keys[0]).Val(), "an entry each, the stale gone")
}
