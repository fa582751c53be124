package memory

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
)

// A decision releases its shard's lock on every path, a panic's included.
// takeHeld (a held key, a sliding log's included, on the store's clock) has a
// deferred Unlock and no recover: a panic there, which takes a broken
// invariant (here a chunk of the slab dropped), goes to the caller with the
// shard unlocked. Every other path recovers: a store clock that panics is
// an error wrapping ErrStore, and the shard is unlocked.
func TestADecisionThatPanicsLeavesItsShardUnlocked(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []backend.Algorithm{backend.GCRA, backend.SlidingWindow} {
		burst := int64(0)
		if alg == backend.GCRA {
			burst = 10
		}
		rule, err := backend.NewRule(alg, 10, time.Second, burst, time.Second, "")
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(WithShards(1), WithSweepInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.Take(ctx, backend.Request{Rule: rule, Key: "k", Cost: 1}); err != nil {
			t.Fatal(err)
		}
		sh := &s.shards[0]
		// The held key's record is gone: takeHeld dereferences nil.
		if alg == backend.SlidingWindow {
			sh.log.chunks[0] = nil
		} else {
			sh.gcra.chunks[0] = nil
		}
		panicked := func() (p any) {
			defer func() { p = recover() }()
			_, _ = s.Take(ctx, backend.Request{Rule: rule, Key: "k", Cost: 1})
			return nil
		}()
		if panicked == nil {
			t.Fatalf("%v: a take through a broken slab did not panic: the test no longer reaches takeHeld", alg)
		}
		if !sh.mu.TryLock() {
			t.Fatalf("%v: the shard stayed locked after a panic in takeHeld", alg)
		}
		sh.mu.Unlock()
	}

	rule, err := backend.NewRule(backend.GCRA, 10, time.Second, 10, time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	req := backend.Request{Rule: rule, Key: "k", Cost: 1}

	boom, err := New(WithShards(1), WithSweepInterval(0), WithStoreClock(func() time.Time { panic("boom") }))
	if err != nil {
		t.Fatal(err)
	}
	defer boom.Close()
	if _, err := boom.Take(ctx, req); !errors.Is(err, backend.ErrStore) {
		t.Fatalf("a store clock that panics: %v, want an error wrapping ErrStore", err)
	}
	if !boom.shards[0].mu.TryLock() {
		t.Fatal("the shard stayed locked after a panic under guard")
	}
	boom.shards[0].mu.Unlock()

	// A key being denied is decided without the lock (see denials), and
	// the store's clock read there too: its panic is an error as well.
	var panics atomic.Bool
	late, err := New(WithShards(1), WithSweepInterval(0), WithStoreClock(func() time.Time {
		if panics.Load() {
			panic("boom")
		}
		return time.Unix(1_700_000_000, 0)
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	for out, err := late.Take(ctx, req); out.Allowed(); out, err = late.Take(ctx, req) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if rd := ruleOf(rule); late.shards[0].gcra.den.find(tagOf(late.hash(&req, rd)), req.Key, rd.scope) == nil {
		t.Fatal("the key at its limit is not published: the test no longer reaches denied")
	}
	panics.Store(true)
	if _, err := late.Take(ctx, req); !errors.Is(err, backend.ErrStore) {
		t.Fatalf("a store clock that panics, on a key being denied: %v, want an error wrapping ErrStore", err)
	}
	if !late.shards[0].mu.TryLock() {
		t.Fatal("the shard is locked after a panic in a decision without the lock")
	}
	late.shards[0].mu.Unlock()
}

// A store clock that panics reaches no goroutine of the store's own: the
// sweeper once called it unguarded, and the panic ended the process.
func TestAClockThatPanicsDoesNotEndTheProcess(t *testing.T) {
	var calls atomic.Int64
	s, err := New(WithSweepInterval(time.Millisecond), WithStoreClock(func() time.Time {
		calls.Add(1)
		panic("boom")
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for deadline := time.Now().Add(10 * time.Second); calls.Load() < 3 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if calls.Load() < 3 {
		t.Fatal("the sweeper never read the clock")
	}
	if n := s.Sweep(); n != 0 {
		t.Fatalf("Sweep on a clock that panics dropped %d", n)
	}
}
