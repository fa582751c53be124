package storetest

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/conformance"
	"github.com/ratelimit-go/ratelimit/nearcache"
	"github.com/ratelimit-go/ratelimit/servertest/serverinfo"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// Logs checks what a sliding log does when its keys part, hold what no
// decision wrote, or are looked at under a rule of the other form: on a
// server of its own, whose command statistics are the checks' alone.
func Logs(t *testing.T, kind testserver.Kind, newStore NewStore) {
	addr := testserver.Own(t, kind).Addr
	t.Run("a long log whose sorted set was evicted heals at its first denial", func(t *testing.T) { lostSortedSet(t, addr, newStore) })
	t.Run("a long log whose meta was evicted keeps its requests' costs", func(t *testing.T) { lostMeta(t, addr, newStore) })
	t.Run("a meta of plausible numbers that disagree with its log heals", func(t *testing.T) { plausibleMeta(t, addr, newStore) })
	t.Run("a denial reads a bounded part of the log, however long, after a lowered limit", func(t *testing.T) { boundedDenials(t, addr, newStore) })
	t.Run("a peek or a refused refund leaves a log of the other form as it is", func(t *testing.T) { looksChangeNothing(t, addr, newStore) })
	t.Run("a bad unit in a short log heals, every request's unit kept", func(t *testing.T) { badUnit(t, addr, newStore) })
	t.Run("a log of more entries than any limit's heals once, then costs what any log does", func(t *testing.T) { hugeLog(t, addr, newStore) })
}

// clockAt is a caller's clock the check moves.
type clockAt struct{ now time.Time }

func (c *clockAt) Now() time.Time { return c.now }

// logLimiter is a Limiter of p on a new store of the server at addr, on
// c's clock.
func logLimiter(t *testing.T, addr string, newStore NewStore, p ratelimit.Policy, c *clockAt) (*ratelimit.Limiter, string) {
	pre := Prefix()
	return Limiter(t, newStore(t, addr), p, pre, ratelimit.WithCallerClock(c.Now), ratelimit.WithRetention(time.Hour)), pre
}

// aLog is the log most checks take: a Limiter of 200 a minute on a new
// store of the server at addr, on a caller's clock (c, from now), an admin
// client of the server, and the server keys of its key "k".
func aLog(t *testing.T, addr string, newStore NewStore) (c *clockAt, l *ratelimit.Limiter, a *goredis.Client, keys []string) {
	c = &clockAt{time.Now()}
	l, pre := logLimiter(t, addr, newStore, ratelimit.PerMinute(200), c)
	return c, l, Admin(t, addr), keysOf(t, pre, "k", l.Policy())
}

// admitAll takes cost until the first denial, moving the clock by step
// before each request, and returns how many were admitted.
func admitAll(t *testing.T, l *ratelimit.Limiter, c *clockAt, key string, cost int, step time.Duration) int {
	t.Helper()
	for n := 0; ; n++ {
		c.now = c.now.Add(step)
		d, err := l.AllowN(context.Background(), key, cost)
		require.NoError(t, err)
		if !d.Allowed {
			return n
		}
		require.LessOrEqual(t, n, ratelimit.MaxLogLimit, "never denied")
	}
}

// The sorted set of a 200-per-minute log is evicted (maxmemory with
// allkeys-lru evicted 13-22% of 300 such logs apart from their meta): the
// meta's count of 150 entries must not keep denying what no entry holds
// (it admitted 50 per minute, for as long as the key was in use).
func lostSortedSet(t *testing.T, addr string, newStore NewStore) {
	ctx := context.Background()
	c := &clockAt{time.Now()}
	l, pre := logLimiter(t, addr, newStore, ratelimit.PerMinute(200), c)
	a := Admin(t, addr)
	for i := 0; i < 150; i++ {
		c.now = c.now.Add(time.Millisecond)
		d, err := l.Allow(ctx, "k")
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	keys := keysOf(t, pre, "k", l.Policy())
	require.NoError(t, a.Del(ctx, keys[0]).Err(), "the sorted set evicted, the meta kept")
	require.Equal(t, 200, admitAll(t, l, c, "k", 1, time.Millisecond), "the window holds none of the lost entries")
	require.EqualValues(t, 200, a.ZCard(ctx, keys[0]).Val())
	require.Equal(t, 0, admitAll(t, l, c, "k", 1, time.Millisecond), "healed: full")
}

// The meta of a log of requests of cost 3 is evicted: its extra units are
// in the members, and must still count (an empty meta counted every entry
// as one unit: 150 units read as 50, and 100 more admitted).
func lostMeta(t *testing.T, addr string, newStore NewStore) {
	ctx := context.Background()
	c := &clockAt{time.Now()}
	l, pre := logLimiter(t, addr, newStore, ratelimit.PerMinute(200), c)
	for i := 0; i < 50; i++ {
		c.now = c.now.Add(time.Millisecond)
		d, err := l.AllowN(ctx, "k", 3)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	keys := keysOf(t, pre, "k", l.Policy())
	require.NoError(t, Admin(t, addr).Del(ctx, keys[1]).Err(), "the meta evicted, the sorted set kept")
	d, err := l.Peek(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, 150, d.Count, "a peek counts every unit")
	require.Equal(t, 50, admitAll(t, l, c, "k", 1, time.Millisecond))
}

// A meta whose numbers are each plausible but disagree with the log (an
// entry count of 10^15 made every call fail for the meta's hour-long TTL:
// a rank Redis cannot parse) is rebuilt from the log.
func plausibleMeta(t *testing.T, addr string, newStore NewStore) {
	ctx := context.Background()
	c, l, a, keys := aLog(t, addr, newStore)
	for _, entries := range []float64{1e15, 5000, 199} {
		require.NoError(t, l.Reset(ctx, "k"))
		for i := 0; i < 10; i++ {
			c.now = c.now.Add(time.Millisecond)
			_, err := l.AllowN(ctx, "k", 2)
			require.NoError(t, err)
		}
		newest := float64(c.now.UnixMicro())
		var meta []byte
		for _, f := range []float64{10, 10, newest, newest - 9000, -1, entries} {
			meta = binary.LittleEndian.AppendUint64(meta, math.Float64bits(f))
		}
		require.NoError(t, a.Set(ctx, keys[1], meta, time.Hour).Err())
		d, err := l.Peek(ctx, "k")
		require.NoError(t, err, "entries %v", entries)
		require.Equal(t, 20, d.Count, "entries %v: the log's units", entries)
		require.Equal(t, 180, admitAll(t, l, c, "k", 1, time.Millisecond), "entries %v", entries)
	}
}

// A limit lowered from 10,000 to 100 over 6,667 entries: each denial walked
// the log from its oldest entry to the one that must leave (10-22 ms of the
// server per denied request, 2.3 ms with requests of cost 2 here), and one
// of a short limit copied 129 entries to see they would not fit. A denial
// now reads at most about half the limit's entries, from the nearer end,
// whatever the log holds: counted in the server's own statistics of the
// commands the scripts ran. The near cache then answers the repeats.
func boundedDenials(t *testing.T, addr string, newStore NewStore) {
	ctx := context.Background()
	a := Admin(t, addr)
	for _, cost := range []int{1, 2} {
		c := &clockAt{time.Now()}
		l, pre := logLimiter(t, addr, newStore, ratelimit.PerMinute(10_000), c)
		key := "lowered-" + strconv.Itoa(cost)
		for i := 0; i < 6_667/cost; i++ {
			c.now = c.now.Add(time.Millisecond)
			d, err := l.AllowN(ctx, key, cost)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		require.NoError(t, l.SetPolicy(ratelimit.PerMinute(100)))
		require.NoError(t, a.ConfigResetStat(ctx).Err())
		const denials = 20
		for i := 0; i < denials; i++ {
			d, err := l.Allow(ctx, key)
			require.NoError(t, err)
			require.False(t, d.Allowed)
			require.Equal(t, 6_667/cost*cost, d.Count)
		}
		ranges := rangeCalls(ctx, t, a)
		t.Logf("cost %d: %d range reads in %d denials", cost, ranges, denials)
		require.LessOrEqual(t, ranges, int64(2*denials), "cost %d: range reads of at most 128 entries per denial", cost)

		// Over the near cache, every denial after the first is answered in
		// process: a key over its lowered limit is denied until RetryAfter.
		near, err := nearcache.New(newStore(t, addr))
		require.NoError(t, err)
		t.Cleanup(func() { _ = near.Close() })
		cached := Limiter(t, near, ratelimit.PerMinute(100), pre, ratelimit.WithCallerClock(c.Now))
		deny := func() {
			d, err := cached.Allow(ctx, key)
			require.NoError(t, err)
			require.False(t, d.Allowed)
		}
		// The cache answers once it hears the channel of changes.
		for deadline := time.Now().Add(10 * time.Second); near.Hits() == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			deny()
		}
		hits, misses := near.Hits(), near.Misses()
		for i := 0; i < denials; i++ {
			deny()
		}
		require.Equal(t, [2]uint64{hits + denials, misses}, [2]uint64{near.Hits(), near.Misses()},
			"cost %d: the near cache answers every repeat (hits, misses)", cost)
	}
}

// rangeCalls is how many commands reading a range of a sorted set the
// server ran since its statistics were reset.
func rangeCalls(ctx context.Context, t *testing.T, a *goredis.Client) int64 {
	calls, err := serverinfo.CommandCalls(ctx, a)
	require.NoError(t, err)
	total := int64(0)
	for name, n := range calls {
		if strings.HasPrefix(name, "z") && strings.Contains(name, "range") && !strings.Contains(name, "remrange") {
			total += n
		}
	}
	return total
}

// A peek, or a refund that is refused, under a rule of the other form (a
// limit changed across lua.ShortLog) changed the key to that form and
// dropped the entries outside the window at its time; a request timed
// earlier then found them gone (350 units in 1 ms at a limit of 300).
func looksChangeNothing(t *testing.T, addr string, newStore NewStore) {
	ctx := context.Background()
	a := Admin(t, addr)
	for _, limits := range [][2]int{{300, 100}, {100, 300}} {
		c := &clockAt{time.Now()}
		l, pre := logLimiter(t, addr, newStore, ratelimit.PerMinute(limits[0]), c)
		key := fmt.Sprintf("%d-to-%d", limits[0], limits[1])
		for i := 0; i < 90; i++ {
			c.now = c.now.Add(500 * time.Millisecond)
			d, err := l.Allow(ctx, key)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		keys := keysOf(t, pre, key, l.Policy())
		typ, before := a.Type(ctx, keys[0]).Val(), dump(ctx, t, a, keys[0])
		other := Limiter(t, newStore(t, addr), ratelimit.PerMinute(limits[1]), pre, ratelimit.WithCallerClock(c.Now))
		c.now = c.now.Add(30 * time.Second) // half the entries are out of the window now
		_, err := other.Peek(ctx, key)
		require.NoError(t, err)
		_, err = other.Refund(ctx, key, limits[1])
		require.ErrorIs(t, err, ratelimit.ErrInvalidCost, "more than the window holds")
		require.Equal(t, typ, a.Type(ctx, keys[0]).Val(), "%v: the form is kept", limits)
		require.Equal(t, before, dump(ctx, t, a, keys[0]), "%v: nothing changed", limits)
		c.now = c.now.Add(-30 * time.Second) // a request timed as the last take
		d, err := l.Peek(ctx, key)
		require.NoError(t, err)
		require.Equal(t, 90, d.Count, "%v: every entry still counts", limits)
	}
}

// dump is what key holds, as bytes of the server's own dump.
func dump(ctx context.Context, t *testing.T, a *goredis.Client, key string) string {
	v, err := a.Dump(ctx, key).Result()
	require.NoError(t, err)
	return v
}

// A unit of a short log overwritten with bytes that are no time: found
// only when the window reaches it, it made the whole log no state, and the
// units admitted after it were forgotten (7 admitted in a window at 5 per
// second). Healed, the log keeps every unit, the bad one taken as a request
// at the next unit's time: no window admits more than the limit, the
// request whose unit was overwritten included.
func badUnit(t *testing.T, addr string, newStore NewStore) {
	ctx := context.Background()
	a := Admin(t, addr)
	c := &clockAt{time.Now().Truncate(time.Second)}
	p := ratelimit.PerSecond(5)
	l, pre := logLimiter(t, addr, newStore, p, c)
	keys := keysOf(t, pre, "k", p)
	var admitted []int64
	take := func() {
		d, err := l.Allow(ctx, "k")
		require.NoError(t, err)
		if d.Allowed {
			admitted = append(admitted, d.At.UnixMicro())
		}
	}
	for i := 0; i < 3; i++ {
		take()
		c.now = c.now.Add(100 * time.Millisecond)
	}
	b, err := a.Get(ctx, keys[0]).Bytes()
	require.NoError(t, err)
	require.Len(t, b, 16+24, "a header and 3 units")
	binary.LittleEndian.PutUint64(b[16+8:], math.Float64bits(math.NaN())) // the second unit
	require.NoError(t, a.Set(ctx, keys[0], b, time.Minute).Err())
	for i := 0; i < 60; i++ {
		take()
		c.now = c.now.Add(50 * time.Millisecond)
	}
	require.Zero(t, conformance.OverAdmissions(admitted, p), "%d admitted over 3.3 s at 5 per second", len(admitted))
	requireValidState(ctx, t, a, keys, ruleOf(t, pre, p, time.Hour), "after the bad unit")
}

// A sorted set of 60,000 entries in the window, under a meta that says
// 150 (a log no decision writes: at most MaxLogLimit entries), once cost
// the server 168 ms a request. It is no state of ours: the first denial
// that checks it deletes it, and from then on a request reads what any
// log's does.
func hugeLog(t *testing.T, addr string, newStore NewStore) {
	ctx := context.Background()
	a := Admin(t, addr)
	c := &clockAt{time.Now()}
	l, pre := logLimiter(t, addr, newStore, ratelimit.PerMinute(200), c)
	for i := 0; i < 150; i++ {
		c.now = c.now.Add(time.Millisecond)
		_, err := l.Allow(ctx, "k")
		require.NoError(t, err)
	}
	keys := keysOf(t, pre, "k", l.Policy())
	at := float64(c.now.UnixMicro())
	for i := 0; i < 60_000; i += 1000 {
		members := make([]goredis.Z, 1000)
		for j := range members {
			members[j] = goredis.Z{Score: at, Member: "x" + strconv.Itoa(i+j)}
		}
		require.NoError(t, a.ZAdd(ctx, keys[0], members...).Err())
	}
	admitAll(t, l, c, "k", 1, time.Millisecond)
	require.LessOrEqual(t, a.ZCard(ctx, keys[0]).Val(), int64(200), "healed: the foreign entries are gone")
	require.NoError(t, a.ConfigResetStat(ctx).Err())
	for i := 0; i < 20; i++ {
		c.now = c.now.Add(time.Millisecond)
		_, err := l.Allow(ctx, "k")
		require.NoError(t, err)
	}
	require.LessOrEqual(t, rangeCalls(ctx, t, a), int64(40), "20 requests on the healed log")
}
