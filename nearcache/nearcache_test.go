package nearcache_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/conformance"
	"github.com/ratelimit-go/ratelimit/guard"
	"github.com/ratelimit-go/ratelimit/internal/counted"
	"github.com/ratelimit-go/ratelimit/nearcache"
)

func cached(t testing.TB, next backend.Store) *nearcache.Store {
	s, err := nearcache.New(next)
	require.NoError(t, err)
	return s
}

// The cache answers nothing the conformance suite could tell from the
// store's own answers, on the memory store (on a real server, with a cache
// per instance: servertest/nearcache).
func TestConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		conformance.Run(t, conformance.InProcess(func(t *testing.T) backend.Store {
			m, err := memory.New()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Close() })
			return cached(t, m)
		}))
	})
}

// A flood on one key at its limit costs the store one call per retry-after,
// not one per request, and every answer is the model's.
func TestAFloodOnADeniedKeyStaysLocal(t *testing.T) {
	for _, alg := range backend.Algorithms() {
		m, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		s := cached(t, m)
		clock := conformance.NewManualClock(time.Unix(1_800_000_000, 0))
		p := ratelimit.NewPolicy(alg, 10, time.Second)
		l, err := ratelimit.New(s, p, ratelimit.WithCallerClock(clock.Now))
		require.NoError(t, err)
		model, ctx := conformance.NewModel(), context.Background()
		rule, err := backend.NewRule(alg, int64(p.Limit), p.Window, int64(p.Burst), p.Window, ratelimit.DefaultPrefix)
		require.NoError(t, err)
		for i := 0; i < 3000; i++ {
			clock.Advance(time.Millisecond)
			want := model.Take(backend.Request{Rule: rule, Key: "abuser", Cost: 1, Now: clock.Now().UnixMicro()})
			got, err := l.Allow(ctx, "abuser")
			require.NoError(t, err)
			require.Equal(t, ratelimit.Decision{Allowed: want.Allowed(), Limit: p.MaxCost(), Remaining: max(p.MaxCost()-int(want.Count), 0),
				Count: int(want.Count), ResetAt: time.UnixMicro(want.ResetAt), RetryAfter: time.Duration(want.RetryAfter) * time.Microsecond,
				At: time.UnixMicro(want.At)}, got, "%v: request %d", alg, i)
		}
		t.Logf("%v: %d of 3000 requests answered by the cache, %d by the store", alg, s.Hits(), s.Misses())
		require.Greater(t, s.Hits(), uint64(2500), "%v: most of a flood is answered locally", alg)
		m.Close()
	}
}

// A cached denial is never used past what the store would say: a Reset or
// a Refund through the cache clears it, and a new policy asks the store.
func TestACachedDenialEndsWithResetRefundOrANewPolicy(t *testing.T) {
	m, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s := cached(t, m)
	l, err := ratelimit.New(s, ratelimit.PerMinute(2))
	require.NoError(t, err)
	ctx := context.Background()
	fill := func() {
		t.Helper()
		for i := 0; i < 3; i++ {
			_, err := l.Allow(ctx, "user")
			require.NoError(t, err)
		}
		d, err := l.Allow(ctx, "user")
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.Equal(t, 1, s.Len(), "the denial is cached")
	}
	fill()
	require.NoError(t, l.Reset(ctx, "user"))
	d, err := l.Allow(ctx, "user")
	require.NoError(t, err)
	require.True(t, d.Allowed, "after a Reset")

	require.NoError(t, l.Reset(ctx, "user"))
	fill()
	_, err = l.Refund(ctx, "user", 1)
	require.NoError(t, err)
	d, err = l.Allow(ctx, "user")
	require.NoError(t, err)
	require.True(t, d.Allowed, "after a Refund")

	fill()
	require.NoError(t, l.SetPolicy(ratelimit.PerMinute(5)))
	d, err = l.Allow(ctx, "user")
	require.NoError(t, err)
	require.True(t, d.Allowed, "under a higher limit")

	_, err = nearcache.New(nil)
	require.ErrorIs(t, err, ratelimit.ErrInvalidArgument)
	_, err = nearcache.New(m, nearcache.WithSize(0))
	require.ErrorIs(t, err, ratelimit.ErrInvalidArgument)
	_, err = nearcache.New(m, nearcache.WithSize(-1))
	require.ErrorIs(t, err, ratelimit.ErrInvalidArgument)
}

// Behind Multi (and so httplimit, grpclimit and ratelimitd) a flood on a
// key at its limit is answered by the cache too: the denying policy's
// decision is the model's, the others are not asked (zero, not observed),
// and nothing is recorded. Multi once took the store's TakeAll past the
// cache: every request reached the store.
func TestAFloodBehindMultiStaysLocal(t *testing.T) {
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	s := cached(t, m)
	clock := conformance.NewManualClock(time.Unix(1_800_000_000, 0))
	var events atomic.Int64
	observe := ratelimit.WithObserver(ratelimit.ObserverFunc(func(context.Context, ratelimit.Event) { events.Add(1) }))
	perIP, err := ratelimit.New(s, ratelimit.PerMinute(100), ratelimit.WithPrefix("ip:"), ratelimit.WithCallerClock(clock.Now), observe)
	require.NoError(t, err)
	perUser, err := ratelimit.New(s, ratelimit.PerMinute(5), ratelimit.WithPrefix("user:"), ratelimit.WithCallerClock(clock.Now), observe)
	require.NoError(t, err)
	multi, err := ratelimit.NewMulti(perIP, perUser)
	require.NoError(t, err)
	ctx := context.Background()
	for i := 0; i < 1000; i++ {
		clock.Advance(time.Millisecond)
		d, err := multi.Allow(ctx, "10.0.0.1", "abuser")
		require.NoError(t, err)
		require.Equal(t, i < 5, d.Allowed, "request %d", i)
		if i >= 5 {
			require.Equal(t, 5, d.Decisions[1].Count, "request %d: the denial", i)
			require.Equal(t, time.Minute-time.Duration(i+1)*time.Millisecond+time.Millisecond, d.RetryAfter, "request %d", i)
		}
	}
	require.Equal(t, uint64(994), s.Hits(), "all but the first denial answered locally")
	require.Equal(t, int64(6*2+994), events.Load(), "one event a policy asked, none for those not asked")
	ip, err := perIP.Peek(ctx, "10.0.0.1")
	require.NoError(t, err)
	require.Equal(t, 5, ip.Count, "the denials took nothing from the other policy")
}

// down is a store whose server is gone.
type down struct{ backend.Unimplemented }

var errDown = errors.New("dial tcp: connection refused")

func (down) Take(context.Context, backend.Request) (backend.Outcome, error) {
	return backend.Outcome{}, errDown
}
func (down) Peek(context.Context, backend.Request) (backend.Outcome, error) {
	return backend.Outcome{}, errDown
}
func (down) Reset(context.Context, string, string) error { return errDown }

// A fallback's denial (beside a *backend.Fallback: the store failed) is
// never held: it is approximate, and the store may be back on the next
// call. Every request of a flood reaches the guard, and the fallback.
func TestAFallbacksDenialIsNotHeld(t *testing.T) {
	local, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = local.Close() })
	fallback := counted.New(local)
	g, err := guard.New(down{}, guard.WithFallback(fallback, 1))
	require.NoError(t, err)
	s := cached(t, g)
	l, err := ratelimit.New(s, ratelimit.PerHour(2))
	require.NoError(t, err)
	for i := range 20 {
		d, err := l.Allow(context.Background(), "k")
		require.NoError(t, err)
		require.Equal(t, ratelimit.SourceFallback, d.Source)
		require.Equal(t, i < 2, d.Allowed, "request %d", i)
	}
	require.Equal(t, int64(20), fallback.Takes.Load(), "no denial answered by the cache")
	require.Zero(t, s.Hits())
}

// A key in its penalty box is answered by the cache for the whole box (its
// denial's RetryAfter is the box's rest), each answer the model's; a Reset
// through the cache lets it out at once.
func TestABoxedKeyStaysLocalForTheBox(t *testing.T) {
	m, err := memory.New()
	require.NoError(t, err)
	defer m.Close()
	s := cached(t, m)
	clock := conformance.NewManualClock(time.Unix(1_800_000_000, 0))
	p := ratelimit.PerSecond(5).BlockFor(time.Hour)
	l, err := ratelimit.New(s, p, ratelimit.WithCallerClock(clock.Now))
	require.NoError(t, err)
	rule, err := backend.NewRule(p.Algorithm, int64(p.Limit), p.Window, 0, p.Window, ratelimit.DefaultPrefix)
	require.NoError(t, err)
	rule, err = rule.WithBlock(p.Block)
	require.NoError(t, err)
	model, ctx := conformance.NewModel(), context.Background()
	const n = 37_000 // one per 100ms: the sixth boxed for an hour, then out
	for i := range n {
		want := model.Take(backend.Request{Rule: rule, Key: "mallory", Cost: 1, Now: clock.Now().UnixMicro()})
		got, err := l.Allow(ctx, "mallory")
		require.NoError(t, err)
		require.Equal(t, want.Allowed(), got.Allowed, "request %d", i)
		require.Equal(t, time.Duration(want.RetryAfter)*time.Microsecond, got.RetryAfter, "request %d", i)
		clock.Advance(100 * time.Millisecond)
	}
	t.Logf("%d of %d requests answered by the cache, %d by the store", s.Hits(), n, s.Misses())
	require.Less(t, s.Misses(), uint64(100), "the box's hour answered locally")
	require.NoError(t, l.Reset(ctx, "mallory"))
	d, err := l.Allow(ctx, "mallory")
	require.NoError(t, err)
	require.True(t, d.Allowed, "a Reset lets it out")
}

// When every policy of a Multi holds a cached denial, the cache answers
// each policy's status, not only the first's, and a peek of a denied key
// too: a flood on keys denied by all three policies (ratelimitd's three
// descriptors of one value) costs the store nothing. The cache once
// answered the first denial alone, and the caller peeked the others at the
// store, one round trip each.
func TestEveryCachedDenialIsAnswered(t *testing.T) {
	m, store, _, clock, limiters := threeLimiters(t, 5)
	multi, err := ratelimit.NewMulti(limiters...)
	require.NoError(t, err)
	ctx := context.Background()
	keys := []string{"v", "v", "v"}
	for range 5 {
		d, err := multi.Allow(ctx, keys...)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	// The first denial is the store's: it caches all three.
	d, err := multi.Allow(ctx, keys...)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	before := store.Calls()
	for i := range 100 {
		clock.Advance(time.Millisecond)
		d, err := multi.Allow(ctx, keys...)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		for j, pd := range d.Decisions {
			require.False(t, pd.At.IsZero(), "request %d: policy %d answered", i, j)
			require.False(t, pd.Allowed)
			require.Equal(t, 5, pd.Count)
			require.Equal(t, clock.Now(), pd.At)
		}
		p, err := limiters[1].Peek(ctx, "v")
		require.NoError(t, err)
		require.False(t, p.Allowed)
		require.Equal(t, 0, p.Remaining)
		require.Equal(t, d.Decisions[1].RetryAfter, p.RetryAfter, "the peek says what the take did")
	}
	require.Zero(t, store.Calls()-before, "no call reached the store")
	// What the cache answered is the store's own answer at that moment.
	p := ratelimit.PerMinute(5)
	rule, err := backend.NewRule(p.Algorithm, int64(p.Limit), p.Window, int64(p.Burst), p.Window, "c:")
	require.NoError(t, err)
	want, err := m.Peek(ctx, backend.Request{Rule: rule, Key: "v", Cost: 1, Now: clock.Now().UnixMicro()})
	require.NoError(t, err)
	got, err := limiters[2].Peek(ctx, "v")
	require.NoError(t, err)
	require.Equal(t, time.Duration(want.RetryAfter)*time.Microsecond, got.RetryAfter)
}

// threeLimiters are three Limiters of perMinute (prefixes a:, b:, c:) on
// the caller's clock over a cache over a counted memory store.
func threeLimiters(t *testing.T, perMinute int) (*memory.Store, *counted.Store, *nearcache.Store, *conformance.ManualClock, []*ratelimit.Limiter) {
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	store := counted.New(m)
	s := cached(t, store)
	clock := conformance.NewManualClock(time.Unix(1_800_000_000, 0))
	var limiters []*ratelimit.Limiter
	for _, prefix := range []string{"a:", "b:", "c:"} {
		l, err := ratelimit.New(s, ratelimit.PerMinute(perMinute), ratelimit.WithPrefix(prefix), ratelimit.WithCallerClock(clock.Now))
		require.NoError(t, err)
		limiters = append(limiters, l)
	}
	return m, store, s, clock, limiters
}

// PeekAll answers the requests with a cached denial itself and asks the
// store for the rest in one call, each answer the store's own.
func TestPeekAllAsksOnlyForWhatItDoesNotHold(t *testing.T) {
	m, store, s, clock, limiters := threeLimiters(t, 2)
	ctx := context.Background()
	for _, l := range limiters[:2] { // a: and b: at their limit, their denials cached
		for range 3 {
			_, err := l.Allow(ctx, "v")
			require.NoError(t, err)
		}
	}
	_, err := limiters[2].Allow(ctx, "v") // c: one of two
	require.NoError(t, err)
	multi, err := ratelimit.NewMulti(limiters...)
	require.NoError(t, err)
	peekAlls, peeks, hits := store.PeekAlls.Load(), store.Peeks.Load(), s.Hits()
	md, err := multi.Peek(ctx, "v", "v", "v")
	require.NoError(t, err)
	require.Equal(t, uint64(1), s.Hits()-hits, "a: and b: answered here")
	require.Equal(t, int64(1), store.PeekAlls.Load()-peekAlls, "the rest in one call")
	require.Equal(t, peeks, store.Peeks.Load())
	require.Equal(t, []bool{false, false, true}, []bool{md.Decisions[0].Allowed, md.Decisions[1].Allowed, md.Decisions[2].Allowed})
	for i, l := range limiters { // the store's own answers, past the cache
		p := l.Policy()
		rule, err := backend.NewRule(p.Algorithm, int64(p.Limit), p.Window, int64(p.Burst), p.Window, string(rune('a'+i))+":")
		require.NoError(t, err)
		want, err := m.Peek(ctx, backend.Request{Rule: rule, Key: "v", Cost: 1, Now: clock.Now().UnixMicro()})
		require.NoError(t, err)
		require.Equal(t, int(want.Count), md.Decisions[i].Count, "policy %d", i)
		require.Equal(t, time.Duration(want.RetryAfter)*time.Microsecond, md.Decisions[i].RetryAfter, "policy %d", i)
	}
}

// On the caller's clock time may step back, and a key's time then stays
// where its latest decision left it (package algorithm's rules). A denial
// cached until a fixed window's end once answered again after a larger
// request, which the store decides itself, was admitted in the next window
// and the clock stepped back a millisecond: the store decides at the key's
// time, in the new window, and admits (the conformance kit found it when its
// clock's hour aligned a window so).
func TestAnAdmissionEndsACachedDenial(t *testing.T) {
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	s := cached(t, m)
	start := time.Unix(1_800_000_000, 0) // a window's start: a multiple of the second
	clock := conformance.NewManualClock(start)
	l, err := ratelimit.New(s, ratelimit.NewPolicy(ratelimit.FixedWindow, 10, time.Second), ratelimit.WithCallerClock(clock.Now))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = l.AllowN(ctx, "k", 10)
	require.NoError(t, err)
	d, err := l.Allow(ctx, "k")
	require.NoError(t, err)
	require.False(t, d.Allowed, "at the limit: the cache holds the denial to the window's end")
	clock.Advance(time.Second) // the next window
	d, err = l.AllowN(ctx, "k", 2)
	require.NoError(t, err)
	require.True(t, d.Allowed, "cost 2 is the store's to decide: the new window admits it")
	clock.Advance(-time.Millisecond) // behind the key's time: decided at it
	d, err = l.Allow(ctx, "k")
	require.NoError(t, err)
	require.True(t, d.Allowed, "the store admits at the key's time, in the new window")
	require.Equal(t, 3, d.Count)
}
