package memory_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/stretchr/testify/require"
)

type manualClock struct{ now time.Time }

func (c *manualClock) Now() time.Time { return c.now }

func newLimiter(t testing.TB, s *memory.Store, p ratelimit.Policy, clock func() time.Time) *ratelimit.Limiter {
	l, err := ratelimit.New(s, p, ratelimit.WithCallerClock(clock))
	require.NoError(t, err)
	return l
}

func TestHoldsAtMostMaxKeys(t *testing.T) {
	for _, maxKeys := range []int{1, 3, 1000, 1001} {
		s, err := memory.New(memory.WithMaxKeys(maxKeys), memory.WithSweepInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		clock := &manualClock{now: time.Unix(1_700_000_000, 0)}
		l := newLimiter(t, s, ratelimit.PerMinute(10), clock.Now)
		for i := 0; i < 10*maxKeys+100; i++ {
			_, err := l.Allow(context.Background(), fmt.Sprint("key-", i))
			require.NoError(t, err)
		}
		require.LessOrEqual(t, s.Len(), maxKeys)
		require.GreaterOrEqual(t, s.Len(), maxKeys*9/10, "the bound is split over shards, but nearly all of it is used")
		s.Close()
	}
}

func TestSweepDropsOnlyKeysWhoseWindowHasPassed(t *testing.T) {
	clock := &manualClock{now: time.Unix(1_700_000_000, 0)}
	s, err := memory.New(memory.WithStoreClock(clock.Now), memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, p := range []ratelimit.Policy{{Limit: 5, Window: time.Second}, {Limit: 5, Window: time.Second, Algorithm: ratelimit.FixedWindow}} {
		l := newLimiter(t, s, p, clock.Now)
		_, err := l.Allow(ctx, "old")
		require.NoError(t, err)
	}
	// Decided on the caller's clock, a state is kept backend.KeepSlack
	// past its window.
	clock.now = clock.now.Add(1500*time.Millisecond + backend.KeepSlack)
	l := newLimiter(t, s, ratelimit.PerSecond(5), clock.Now)
	_, err = l.Allow(ctx, "recent")
	require.NoError(t, err)
	_, err = l.Peek(ctx, "peeked") // a peek stores nothing
	require.NoError(t, err)
	require.Equal(t, 3, s.Len(), "\"old\" under two algorithms is two states, each of its algorithm alone")

	require.Equal(t, 2, s.Sweep(), "both states of \"old\" are idle")
	require.Equal(t, 1, s.Len())
	d, err := l.Peek(ctx, "recent")
	require.NoError(t, err)
	require.Equal(t, 1, d.Count, "a key still in its window keeps its history")
}

// A key lives under several prefixes as one state under each: each goes when
// it is reset or idle, and the other stays.
func TestAKeyUnderSeveralLimitersIsAStateForEach(t *testing.T) {
	clock := &manualClock{now: time.Unix(1_700_000_000, 0)}
	s, err := memory.New(memory.WithStoreClock(clock.Now), memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	short := newLimiter(t, s, ratelimit.PerSecond(5), clock.Now)
	long, err := ratelimit.New(s, ratelimit.PerMinute(5), ratelimit.WithCallerClock(clock.Now), ratelimit.WithPrefix("other:"))
	require.NoError(t, err)
	for _, l := range []*ratelimit.Limiter{short, long} {
		_, err := l.Allow(ctx, "k")
		require.NoError(t, err)
	}
	require.Equal(t, 2, s.Len())

	clock.now = clock.now.Add(2 * time.Second) // short's window has passed, long's has not
	require.Equal(t, 1, s.Sweep(), "short's state is idle")
	d, err := long.Peek(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, 1, d.Count, "sweeping kept the state still in its window")

	require.Equal(t, 1, s.Len())

	_, err = short.Allow(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, long.Reset(ctx, "k"))
	require.Equal(t, 1, s.Len(), "short's state is still held")
	require.NoError(t, short.Reset(ctx, "k"))
	require.Zero(t, s.Len(), "the last reset drops the key")
	d, err = long.Peek(ctx, "k")
	require.NoError(t, err)
	require.Zero(t, d.Count)
}

func TestSweeperRunsInTheBackgroundUntilClose(t *testing.T) {
	s, err := memory.New(memory.WithSweepInterval(5 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	l, err := ratelimit.New(s, ratelimit.Policy{Limit: 1, Window: time.Millisecond})
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "k")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.Len() == 0 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	_, err = l.Allow(context.Background(), "k")
	require.NoError(t, err, "a closed store still answers")
}

func TestDeniedFloodKeepsAtMostLimitEntries(t *testing.T) {
	clock := &manualClock{now: time.Unix(1_700_000_000, 0)}
	s, err := memory.New(memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := newLimiter(t, s, ratelimit.PerMinute(100), clock.Now)
	for i := 0; i < 100_000; i++ {
		clock.now = clock.now.Add(time.Microsecond)
		_, err := l.Allow(context.Background(), "abuser")
		require.NoError(t, err)
	}
	require.Equal(t, 100, s.LogEntries(ratelimit.DefaultPrefix, "abuser"))
}

func TestWarmKeyDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	s, err := memory.New(memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, alg := range backend.Algorithms() {
		clock := &manualClock{now: time.Unix(1_700_000_000, 0)}
		l := newLimiter(t, s, ratelimit.NewPolicy(alg, 100, time.Second), clock.Now)
		allocs := testing.AllocsPerRun(10_000, func() {
			clock.now = clock.now.Add(3 * time.Millisecond) // admits and prunes in turn
			_, _ = l.Allow(ctx, "warm")
		})
		require.Zero(t, allocs, "%v, on the caller's clock", alg)
		// On the store's clock (the Limiter's shortest path), at 100 per
		// second: admitting, then denying.
		l, err := ratelimit.New(s, ratelimit.NewPolicy(alg, 100, time.Second), ratelimit.WithPrefix("store-clock:"))
		require.NoError(t, err)
		allocs = testing.AllocsPerRun(10_000, func() { _, _ = l.Allow(ctx, "warm") })
		require.Zero(t, allocs, "%v, on the store's clock", alg)
	}
	runtime.KeepAlive(s)
}

// A million distinct keys through a store capped at 10,000 keys: it holds at
// most the cap, and its heap stays within a generous bound of the cap's worth
// (unbounded, a million keys would take hundreds of MB).
func TestAMillionKeysStayWithinTheCap(t *testing.T) {
	const maxKeys, keys, limit = 10_000, 1_000_000, 10
	s, err := memory.New(memory.WithMaxKeys(maxKeys), memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	clock := &manualClock{now: time.Unix(1_700_000_000, 0)}
	l := newLimiter(t, s, ratelimit.PerMinute(limit), clock.Now)
	ctx := context.Background()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	buf := make([]byte, 0, 16)
	for i := 0; i < keys; i++ {
		buf = strconv.AppendInt(buf[:0], int64(i), 10)
		if _, err := l.AllowN(ctx, string(buf), limit); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	require.LessOrEqual(t, s.Len(), maxKeys)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	perKey := int64(1_000) // measured: about 335 B for a key holding one entry (a request of cost 10)
	t.Logf("heap grew by %d B for %d keys held (%d B each)", grown, s.Len(), grown/int64(s.Len()))
	require.Less(t, grown, 4*maxKeys*perKey, "heap growth bounded by the cap")
	runtime.KeepAlive(s)
}

// A flood of new keys through a full store: by default it evicts the least
// recently used key even in the middle of its window (which then gets its
// full quota again), and counts it; WithWhenFull(RefuseNewKeys) refuses the
// new keys instead, so that the Limiter's failure mode decides, and the key
// keeps its history. Idle keys make room either way.
func TestAFloodOfNewKeys(t *testing.T) {
	for _, whenFull := range []memory.WhenFull{memory.EvictLeastRecent, memory.RefuseNewKeys} {
		clock := &manualClock{now: time.Unix(1_700_000_000, 0)}
		s, err := memory.New(memory.WithMaxKeys(1), memory.WithSweepInterval(0), memory.WithStoreClock(clock.Now), memory.WithWhenFull(whenFull))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx := context.Background()
		l := newLimiter(t, s, ratelimit.PerMinute(3), clock.Now)
		open, err := ratelimit.New(s, ratelimit.PerMinute(3), ratelimit.WithCallerClock(clock.Now), ratelimit.WithFailOpen())
		require.NoError(t, err)
		for i := 0; i < 3; i++ {
			_, err := l.Allow(ctx, "victim")
			require.NoError(t, err)
		}
		for i := 0; i < 100; i++ {
			_, err := l.Allow(ctx, fmt.Sprint("flood-", i))
			if whenFull == memory.EvictLeastRecent {
				require.NoError(t, err)
				continue
			}
			require.ErrorIs(t, err, memory.ErrFull, "a new key is refused")
			require.ErrorIs(t, err, ratelimit.ErrStore, "as a store failure")
			d, err := open.Allow(ctx, fmt.Sprint("flood-", i))
			require.NoError(t, err)
			require.Equal(t, ratelimit.SourceFailOpen, d.Source, "the failure mode decides")
		}
		d, err := l.Allow(ctx, "victim")
		require.NoError(t, err)
		if whenFull == memory.EvictLeastRecent {
			require.True(t, d.Allowed, "evicted in the middle of its window: a fresh quota")
			require.Equal(t, uint64(101), s.ActiveEvictions(), "the victim, 99 flood keys evicted by the next, and the last by the victim's return")
		} else {
			require.False(t, d.Allowed, "the victim kept its history")
			require.Equal(t, uint64(200), s.Refused(), "every flood key, once per Limiter")
			require.Zero(t, s.ActiveEvictions())
		}

		clock.now = clock.now.Add(2 * time.Minute) // every window has passed
		_, err = l.Allow(ctx, "newcomer")
		require.NoError(t, err, "%v: an idle key makes room", whenFull)
	}
}

// The sweeper once dropped a key by the window it was written with: after
// SetPolicy lengthened the window, a sweep in between lost the history.
// With WithRetention the state is kept for the retention, whatever the
// window was.
func TestSweepKeepsTheRetention(t *testing.T) {
	for _, alg := range backend.Algorithms() {
		clock := &manualClock{now: time.Unix(1_800_000_000, 0)}
		s, err := memory.New(memory.WithStoreClock(clock.Now), memory.WithSweepInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		l, err := ratelimit.New(s, ratelimit.NewPolicy(alg, 5, 500*time.Millisecond), ratelimit.WithRetention(10*time.Second))
		require.NoError(t, err)
		ctx := context.Background()
		for i := 0; i < 5; i++ {
			_, err := l.Allow(ctx, "user")
			require.NoError(t, err)
		}
		require.NoError(t, l.SetPolicy(ratelimit.NewPolicy(alg, 5, 10*time.Second)))
		clock.now = clock.now.Add(2 * time.Second)
		require.Zero(t, s.Sweep(), "%v: within the retention", alg)
		d, err := l.Peek(ctx, "user")
		require.NoError(t, err)
		want := 5
		if alg == ratelimit.GCRA {
			want = 4 // 2s at 5 per 10s drained one
		}
		require.Equal(t, want, d.Count, "%v: the history is kept", alg)
		clock.now = clock.now.Add(10 * time.Second)
		require.Equal(t, 1, s.Sweep(), "%v: past the retention", alg)
		s.Close()
	}
}

// The sweeper once compared a key's expiry on the caller's clock with the
// store's clock: with a caller's clock 2 minutes behind the store's, it
// dropped keys in the middle of their window, and a 3-per-minute key
// admitted 10 of 10 calls in 3s. One clock, the store's, decides what may
// be dropped.
func TestSweepGoesByTheStoresClockWhateverTheCallersSays(t *testing.T) {
	store := &manualClock{now: time.Unix(1_800_000_000, 0)}
	s, err := memory.New(memory.WithStoreClock(store.Now), memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	caller := func() time.Time { return store.now.Add(-2 * time.Minute) }
	for _, alg := range backend.Algorithms() {
		l, err := ratelimit.New(s, ratelimit.NewPolicy(alg, 3, time.Minute), ratelimit.WithCallerClock(caller), ratelimit.WithPrefix(alg.String()+":"))
		require.NoError(t, err)
		admitted := 0
		for i := 0; i < 10; i++ {
			store.now = store.now.Add(300 * time.Millisecond)
			s.Sweep()
			d, err := l.Allow(context.Background(), "user")
			require.NoError(t, err)
			if d.Allowed {
				admitted++
			}
		}
		require.Equal(t, 3, admitted, "%v: 10 calls in 3s at 3 per minute", alg)
	}
}

// Logs are bounded by their entries, not only by keys: keys at a large
// limit evict the least recently used ones once the entries reach the
// bound.
func TestHoldsAtMostMaxEntries(t *testing.T) {
	clock := &manualClock{now: time.Unix(1_800_000_000, 0)}
	s, err := memory.New(memory.WithStoreClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxEntries(64*1000), memory.WithShards(64))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := newLimiter(t, s, ratelimit.PerHour(ratelimit.MaxLogLimit), clock.Now)
	ctx := context.Background()
	for k := 0; k < 200; k++ {
		for i := 0; i < 500; i++ {
			_, err := l.Allow(ctx, fmt.Sprint("key-", k))
			require.NoError(t, err)
		}
	}
	entries := 0
	held, bounds := s.ShardEntries()
	for i := range held {
		require.LessOrEqual(t, held[i], bounds[i]+500, "shard %d: at most its bound and the key being decided", i)
		entries += held[i]
	}
	require.LessOrEqual(t, entries, 64*1000+64*500)
	require.Positive(t, s.ActiveEvictions(), "100,000 entries were made for a bound of 64,000")
	t.Logf("%d entries held over %d keys, %d keys evicted", entries, s.Len(), s.ActiveEvictions())
}
