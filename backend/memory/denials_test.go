package memory_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/conformance"
)

// denyingAlgorithms are the algorithms whose denials are published (see
// the store's denials): every one (a log's, a copy of what they read).
var denyingAlgorithms = []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.SlidingWindowCounter, ratelimit.GCRA, ratelimit.SlidingWindow}

// A key at its limit, on the store's clock, is denied without its shard's
// lock: with the lock held elsewhere, its Take still answers, and answers as
// the model does. Whatever writes the key (a refund, a charge, a reset)
// withdraws what was published, a peek does not, and a new policy or the
// window passing is decided under the lock again: each next decision is the
// model's.
func TestAKeyBeingDeniedIsDecidedWithoutTheLock(t *testing.T) {
	ctx := context.Background()
	for _, alg := range denyingAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clock := &manualClock{now: time.Unix(1_700_000_000, 0)}
			s, err := memory.New(memory.WithSweepInterval(0), memory.WithStoreClock(clock.Now))
			require.NoError(t, err)
			defer s.Close()
			p := ratelimit.NewPolicy(alg, 3, time.Hour)
			l, err := ratelimit.New(s, p)
			require.NoError(t, err)
			model := conformance.NewModel()
			const key = "abuser"
			req := func(p ratelimit.Policy, n int) backend.Request {
				rule, err := backend.NewRule(p.Algorithm, int64(p.Limit), p.Window, int64(p.Burst), p.Window, ratelimit.DefaultPrefix)
				require.NoError(t, err)
				return backend.Request{Rule: rule, Key: key, Cost: int64(n), Now: clock.now.UnixMicro()}
			}
			allow := func(want bool) ratelimit.Decision {
				t.Helper()
				d, err := l.Allow(ctx, key)
				require.NoError(t, err)
				require.Equal(t, decisionOf(model.Take(req(l.Policy(), 1)), l.Policy().MaxCost()), d)
				require.Equal(t, want, d.Allowed)
				return d
			}
			denying := func() bool { return s.Denying(ratelimit.DefaultPrefix, key, alg) }

			for range 3 {
				allow(true)
			}
			require.False(t, denying(), "an admitting key is published")
			denied := allow(false)
			require.True(t, denying(), "a key denied and left as it was is published")
			_, err = l.Peek(ctx, key)
			require.NoError(t, err)
			require.True(t, denying(), "a peek, which writes nothing, withdrew the denial")

			// With the shard locked, a Take of the key still answers: it
			// takes no lock. A Take that waited for it would never answer.
			clock.now = clock.now.Add(time.Millisecond)
			unlock := s.LockShard(ratelimit.DefaultPrefix, key, alg)
			answered := make(chan ratelimit.Decision, 1)
			go func() {
				d, err := l.Allow(ctx, key)
				if err != nil {
					t.Error(err)
				}
				answered <- d
			}()
			var d ratelimit.Decision
			select {
			case d = <-answered:
			case <-time.After(30 * time.Second):
				unlock()
				t.Fatal("a Take of a key being denied waited for its shard's lock")
			}
			unlock()
			require.False(t, d.Allowed)
			require.Equal(t, decisionOf(model.Take(req(p, 1)), p.MaxCost()), d)
			require.Equal(t, denied.Limit, d.Limit)

			// A refund gives quota back.
			_, err = l.Refund(ctx, key, 1)
			require.NoError(t, err)
			_, ok := model.Refund(req(p, 1))
			require.True(t, ok)
			require.False(t, denying(), "a refund left the denial published")
			allow(true)
			allow(false)

			// A charge takes more, past the limit: the count says so.
			require.True(t, denying())
			_, err = l.Charge(ctx, key, 2)
			require.NoError(t, err)
			model.Charge(req(p, 2))
			require.False(t, denying(), "a charge left the denial published")
			allow(false)

			// A reset forgets the key.
			require.True(t, denying())
			require.NoError(t, l.Reset(ctx, key))
			model.Reset(ratelimit.DefaultPrefix, key)
			require.False(t, denying(), "a reset left the denial published")
			allow(true)
			for range 2 {
				allow(true)
			}
			allow(false)

			// A higher limit admits at once: the copy is decided under
			// the request's rule.
			require.True(t, denying())
			higher := ratelimit.NewPolicy(alg, 5, time.Hour)
			require.NoError(t, l.SetPolicy(higher))
			allow(true)
			require.NoError(t, l.SetPolicy(p))
			allow(false)

			// The window passing admits.
			require.True(t, denying())
			clock.now = clock.now.Add(2 * time.Hour)
			allow(true)
			require.False(t, denying())
		})
	}
}

// Many goroutines hammering keys at their limit while another refunds:
// what each key holds at the end is exactly what it admitted less what was
// refunded, and never more than its limit, as denials without the lock and
// the locked path's admissions and refunds interleave.
func TestConcurrentDenialsAdmitExactly(t *testing.T) {
	const limit, goroutines, takes, refunds = 20, 8, 400, 30
	ctx := context.Background()
	s, err := memory.New(memory.WithSweepInterval(0))
	require.NoError(t, err)
	defer s.Close()
	for _, alg := range denyingAlgorithms {
		l, err := ratelimit.New(s, ratelimit.NewPolicy(alg, limit, time.Hour), ratelimit.WithPrefix("exact:"))
		require.NoError(t, err)
		for _, key := range []string{"a", "b"} {
			var admitted, refunded atomic.Int64
			for range limit + 2 { // at its limit, and published: the goroutines start without the lock
				if d, err := l.Allow(ctx, key); err == nil && d.Allowed {
					admitted.Add(1)
				}
			}
			require.True(t, s.Denying("exact:", key, alg), "%v: the test no longer starts from a published denial", alg)
			var wg sync.WaitGroup
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range takes {
						d, err := l.Allow(ctx, key)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range refunds {
					if _, err := l.Refund(ctx, key, 1); err == nil {
						refunded.Add(1)
					}
				}
			}()
			wg.Wait()
			held := admitted.Load() - refunded.Load()
			require.GreaterOrEqual(t, admitted.Load(), int64(limit), "%v, key %q", alg, key)
			require.LessOrEqual(t, held, int64(limit), "%v, key %q: admitted %d, refunded %d", alg, key, admitted.Load(), refunded.Load())
			d, err := l.Peek(ctx, key)
			require.NoError(t, err)
			require.Equal(t, held, int64(d.Count), "%v, key %q: admitted %d, refunded %d", alg, key, admitted.Load(), refunded.Load())
		}
	}
}

// A table's slots for copies grow with its index: the copies published
// before move over, so a key denied for long keeps being decided without
// the lock while new keys arrive.
func TestCopiesMoveOverAsTheIndexGrows(t *testing.T) {
	ctx := context.Background()
	s, err := memory.New(memory.WithShards(1), memory.WithSweepInterval(0))
	require.NoError(t, err)
	defer s.Close()
	l, err := ratelimit.New(s, ratelimit.NewPolicy(ratelimit.GCRA, 1, time.Hour))
	require.NoError(t, err)
	deny := func(key string) {
		for range 3 { // admitted, denied, denied marked used
			_, err := l.Allow(ctx, key)
			require.NoError(t, err)
		}
	}
	deny("early")
	require.True(t, s.Denying(ratelimit.DefaultPrefix, "early", ratelimit.GCRA))
	for i := range 1000 {
		deny(fmt.Sprint("later-", i))
	}
	require.True(t, s.Denying(ratelimit.DefaultPrefix, "early", ratelimit.GCRA), "a copy was dropped as the index grew")
	published := 0
	for i := range 1000 {
		if s.Denying(ratelimit.DefaultPrefix, fmt.Sprint("later-", i), ratelimit.GCRA) {
			published++
		}
	}
	require.GreaterOrEqual(t, published, 950, "keys denied, most with a copy (a key whose slots are taken has none)")
}

// On the store's default clock, the path a Take takes when no clock is
// given: a denied key answers while its shard is locked elsewhere too.
func TestADeniedKeyAnswersWithItsShardLockedOnTheDefaultClock(t *testing.T) {
	ctx := context.Background()
	s, err := memory.New(memory.WithSweepInterval(0))
	require.NoError(t, err)
	defer s.Close()
	for _, alg := range denyingAlgorithms {
		l, err := ratelimit.New(s, ratelimit.NewPolicy(alg, 1, time.Hour))
		require.NoError(t, err)
		for range 3 { // admitted, denied, denied marked used
			_, err := l.Allow(ctx, "abuser")
			require.NoError(t, err)
		}
		require.True(t, s.Denying(ratelimit.DefaultPrefix, "abuser", alg), "%v", alg)
		unlock := s.LockShard(ratelimit.DefaultPrefix, "abuser", alg)
		answered := make(chan ratelimit.Decision, 1)
		go func() {
			d, err := l.Allow(ctx, "abuser")
			if err != nil {
				t.Error(err)
			}
			answered <- d
		}()
		select {
		case d := <-answered:
			unlock()
			require.False(t, d.Allowed, "%v", alg)
			require.Positive(t, d.RetryAfter, "%v", alg)
		case <-time.After(30 * time.Second):
			unlock()
			t.Fatalf("%v: a Take of a key being denied waited for its shard's lock", alg)
		}
	}
}

// A Multi over the store decides with TakeAll, whose denials publish copies
// as a Take's do: when every policy's key is being denied, on the default
// clock, it is answered without any lock, and each policy's Decision is
// what its Peek says; when one of them still admits, the locks decide, and
// nothing is recorded past a limit.
func TestAMultiOfKeysBeingDeniedTakesNoLock(t *testing.T) {
	ctx := context.Background()
	s, err := memory.New(memory.WithSweepInterval(0))
	require.NoError(t, err)
	defer s.Close()
	fixed, err := ratelimit.New(s, ratelimit.NewPolicy(ratelimit.FixedWindow, 1, time.Hour), ratelimit.WithPrefix("f:"))
	require.NoError(t, err)
	gcra, err := ratelimit.New(s, ratelimit.NewPolicy(ratelimit.GCRA, 1, time.Hour), ratelimit.WithPrefix("g:"))
	require.NoError(t, err)
	m, err := ratelimit.NewMulti(fixed, gcra)
	require.NoError(t, err)
	for range 3 { // admitted; denied (TakeAll's peeks); denied, the keys marked used: published
		_, err := m.Allow(ctx, "abuser", "abuser")
		require.NoError(t, err)
	}
	require.True(t, s.Denying("f:", "abuser", ratelimit.FixedWindow), "a Multi's denials publish no copy")
	require.True(t, s.Denying("g:", "abuser", ratelimit.GCRA), "a Multi's denials publish no copy")

	unlock := s.LockShard("g:", "abuser", ratelimit.GCRA)
	answered := make(chan ratelimit.MultiDecision, 1)
	go func() {
		d, err := m.Allow(ctx, "abuser", "abuser")
		if err != nil {
			t.Error(err)
		}
		answered <- d
	}()
	var d ratelimit.MultiDecision
	select {
	case d = <-answered:
		unlock()
	case <-time.After(30 * time.Second):
		unlock()
		t.Fatal("a Multi of keys being denied waited for a shard's lock")
	}
	require.False(t, d.Allowed)
	peeked, err := m.Peek(ctx, "abuser", "abuser")
	require.NoError(t, err)
	for i, got := range d.Decisions {
		want := peeked.Decisions[i]
		require.False(t, got.Allowed, "policy %d", i)
		require.Equal(t, want.Count, got.Count, "policy %d", i)
		require.Equal(t, want.Limit, got.Limit, "policy %d", i)
		require.Positive(t, got.RetryAfter, "policy %d", i)
	}

	// A key admitting beside one denied: the locks decide, nothing is taken.
	d, err = m.Allow(ctx, "abuser", "fresh")
	require.NoError(t, err)
	require.False(t, d.Allowed)
	p, err := gcra.Peek(ctx, "fresh")
	require.NoError(t, err)
	require.Zero(t, p.Count, "a denied Multi recorded a request")
}

// A log's denial that its copy could not decide (a cost whose retry lies
// past the oldest entries the copy holds) publishes no copy: each such
// request, which a client may send again and again, once published a copy
// that its own next request declined and withdrew, an allocation a
// request. A denial the copy decides is published as before.
func TestALogDenialItsCopyCannotDecideAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	s, err := memory.New(memory.WithSweepInterval(0))
	require.NoError(t, err)
	defer s.Close()
	l, err := ratelimit.New(s, ratelimit.NewPolicy(ratelimit.SlidingWindow, 20, time.Hour)) // the store's clock
	require.NoError(t, err)
	denying := func() bool { return s.Denying(ratelimit.DefaultPrefix, "k", ratelimit.SlidingWindow) }
	for range 20 {
		d, err := l.Allow(ctx, "k")
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	large := func() {
		d, err := l.AllowN(ctx, "k", 10) // its retry waits on the 10th oldest entry; a copy holds 8
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.Equal(t, 20, d.Count)
	}
	large()
	require.False(t, denying(), "a copy that cannot decide the denial is published")
	d, err := l.Allow(ctx, "k")
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.True(t, denying(), "a denial of cost 1, which the copy decides, is not published")
	large()
	require.False(t, denying(), "the copy the large cost declined is withdrawn, and not made again")
	if !raceEnabled {
		require.Zero(t, testing.AllocsPerRun(100, large), "allocations per denial of a large cost")
	}
}
