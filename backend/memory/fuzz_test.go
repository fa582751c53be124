package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/conformance"
)

// FuzzMatchesTheModel drives the memory store and the reference model with
// the same sequence of Allow, AllowN, Peek, Refund, Reset and SetPolicy calls
// (every algorithm) and
// clock steps (forwards and back), decoded from the input, and requires
// identical decisions. Two Limiters with different prefixes share the store
// and the keys, as the store holds one entry per key for all of them. Each
// sequence runs twice: on the caller's clock, and on the store's (where a
// key being denied is decided without the lock: see the store's denials).
// go test runs the corpus in testdata; go test -fuzz explores further.
func FuzzMatchesTheModel(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte("sliding and fixed windows, clocks that step back, new policies"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		matchesTheModel(t, ops, false)
		matchesTheModel(t, ops, true)
	})
}

// matchesTheModel is FuzzMatchesTheModel's run of ops, on the store's clock
// or on the caller's.
func matchesTheModel(t *testing.T, ops []byte, storeClock bool) {
	now := time.UnixMicro(1_700_000_000_000_000)
	opts := []memory.Option{memory.WithSweepInterval(0), memory.WithMaxKeys(1 << 20)}
	clock := ratelimit.WithCallerClock(func() time.Time { return now })
	if storeClock {
		opts = append(opts, memory.WithStoreClock(func() time.Time { return now }))
		clock = ratelimit.WithCallerClock(nil)
	}
	s, err := memory.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	prefixes := []string{ratelimit.DefaultPrefix, "other:"}
	var limiters []*ratelimit.Limiter
	for _, prefix := range prefixes {
		l, err := ratelimit.New(s, ratelimit.Policy{Limit: 3, Window: 100 * time.Millisecond}, clock, ratelimit.WithPrefix(prefix),
			ratelimit.WithRetention(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		limiters = append(limiters, l)
	}
	model := conformance.NewModel()
	ctx := context.Background()
	keys := []string{"a", "b", "{a}"}
	for i := 0; i+1 < len(ops); i += 2 {
		op, arg := ops[i], int(ops[i+1])
		key := keys[arg%len(keys)]
		which := int(op/8) % len(limiters)
		l := limiters[which]
		p := l.Policy()
		rule, err := backend.NewRule(p.Algorithm, int64(p.Limit), p.Window, int64(p.Burst), time.Second, prefixes[which])
		if err != nil {
			t.Fatal(err)
		}
		req := backend.Request{Rule: rule, Key: key, Cost: 1, Now: now.UnixMicro()}
		var got ratelimit.Decision
		var want backend.Outcome
		switch op % 8 {
		case 0: // Allow
			want = model.Take(req)
			got, err = l.Allow(ctx, key)
		case 1: // Refund
			req.Cost = int64(1 + arg%p.MaxCost())
			var ok bool
			want, ok = model.Refund(req)
			got, err = l.Refund(ctx, key, int(req.Cost))
			if !ok {
				if !errors.Is(err, ratelimit.ErrInvalidCost) {
					t.Fatalf("op %d: a refund of %d on %q%q: %v, want ErrInvalidCost", i/2, req.Cost, prefixes[which], key, err)
				}
				continue
			}
		case 2: // AllowN
			req.Cost = int64(1 + arg%p.MaxCost())
			want = model.Take(req)
			got, err = l.AllowN(ctx, key, int(req.Cost))
		case 3: // Peek
			want = model.Peek(req)
			got, err = l.Peek(ctx, key)
		case 4: // Reset
			model.Reset(prefixes[which], key)
			if err := l.Reset(ctx, key); err != nil {
				t.Fatal(err)
			}
			continue
		case 5: // SetPolicy
			np := ratelimit.Policy{Limit: 1 + arg%6, Window: time.Duration(1+arg%250) * time.Millisecond, Algorithm: ratelimit.Algorithm(arg / 64)}
			if np.Algorithm == ratelimit.GCRA {
				np.Burst = 1 + arg%5
			}
			if err := l.SetPolicy(np); err != nil {
				t.Fatal(err)
			}
			continue
		case 6: // the clock steps forwards, up to 255ms
			now = now.Add(time.Duration(arg) * time.Millisecond)
			continue
		case 7: // and back, up to 31ms (a request arriving late)
			now = now.Add(-time.Duration(arg%32) * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if want := decisionOf(want, p.MaxCost()); got != want {
			t.Fatalf("op %d (%d, %d) on %q%q under %v at %v (the store's clock: %v):\n got %+v\nwant %+v", i/2, op, arg, prefixes[which], key, p, now.UnixMicro(), storeClock, got, want)
		}
	}
}

// decisionOf is the model's outcome as the Decision a Limiter makes of it.
func decisionOf(o backend.Outcome, limit int) ratelimit.Decision {
	return ratelimit.Decision{Allowed: o.Allowed(), Limit: limit, Remaining: max(limit-int(o.Count), 0), Count: int(o.Count),
		ResetAt: time.UnixMicro(o.ResetAt), RetryAfter: time.Duration(o.RetryAfter) * time.Microsecond, At: time.UnixMicro(o.At)}
}
