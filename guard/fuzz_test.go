package guard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/guard"
	"github.com/ratelimit-go/ratelimit/nearcache"
)

// FuzzTheLayers drives the public API through every layer a service stacks
// (a Limiter over a near cache over a guard whose primary fails at random,
// with a memory fallback on few shards) with calls decoded from the input:
// AllowN, Peek, Refund and Reset at any cost (bad ones included), WaitN
// with a short deadline, new policies of every algorithm, clock steps
// (before the epoch included) and the primary going down and up. Every call
// must return (a lock left held never does), without a panic, with a
// decision or an error wrapping one of the package's sentinels. The fuzz
// of bare stores never found a panic; this chain found a division by zero
// and a hang in degraded mode. go test runs the seeds and testdata's
// corpus; go test -fuzz FuzzTheLayers ./guard explores further.
func FuzzTheLayers(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0})
	// What the fuzz of the public API found: 4 instances, the primary
	// down, the counter at 10 per 50ms, AllowN of 3 (over the share of 2),
	// then a Peek on the same shard.
	f.Add([]byte{3, 8, 1, 5, 128 + 9, 0, 4, 1, 0})
	f.Add([]byte("every algorithm, costs over the share, clocks before 1970, a primary that comes and goes"))
	f.Fuzz(layers)
}

func layers(t *testing.T, ops []byte) {
	{
		primary := &flaky{Store: newMemory(t)}
		fallback, err := memory.New(memory.WithSweepInterval(0), memory.WithShards(2), memory.WithMaxKeys(8))
		if err != nil {
			t.Fatal(err)
		}
		defer fallback.Close()
		instances := 1
		if len(ops) > 0 {
			instances = 1 + int(ops[0]%8)
		}
		g, err := guard.New(primary, guard.WithFallback(fallback, instances), guard.WithFailures(1), guard.WithCoolDown(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		near, err := nearcache.New(g, nearcache.WithSize(4))
		if err != nil {
			t.Fatal(err)
		}
		now := time.UnixMicro(1_700_000_000_000_000)
		l, err := ratelimit.New(near, ratelimit.PerSecond(10), ratelimit.WithCallerClock(func() time.Time { return now }),
			ratelimit.WithRetention(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		keys := []string{"a", "b", "c", "{a}", "d"}
		ops = ops[:min(len(ops), 401)] // 200 calls: a longer input finds nothing more, and minimises slowly
		for i := 1; i+1 < len(ops); i += 2 {
			op, arg := ops[i], int(ops[i+1])
			key := keys[arg%len(keys)]
			cost := arg%12 - 1 // -1 to 10: bad costs too
			what := fmt.Sprintf("op %d (%d, %d) under %v, %d instances, primary down: %v", i/2, op, arg, l.Policy(), instances, primary.down.Load())
			var err error
			switch op % 9 {
			case 0:
				_, err = answer(t, what, func() (ratelimit.Decision, error) { return l.AllowN(ctx, key, cost) })
			case 1:
				_, err = answer(t, what, func() (ratelimit.Decision, error) { return l.Peek(ctx, key) })
			case 2:
				_, err = answer(t, what, func() (ratelimit.Decision, error) { return l.Refund(ctx, key, cost) })
			case 3:
				_, err = answer(t, what, func() (ratelimit.Decision, error) { return ratelimit.Decision{}, l.Reset(ctx, key) })
			case 4:
				_, err = answer(t, what, func() (ratelimit.Decision, error) {
					wctx, cancel := context.WithTimeout(ctx, time.Millisecond)
					defer cancel()
					return l.WaitN(wctx, key, cost)
				})
				if errors.Is(err, context.DeadlineExceeded) {
					err = nil
				}
			case 5: // a new policy: arg picks the algorithm, the limit and the window
				p := ratelimit.NewPolicy(ratelimit.Algorithm(arg/64), 1+arg%10, time.Duration(1+arg%7)*time.Millisecond*10)
				err = l.SetPolicy(p)
			case 6: // the clock steps forwards
				now = now.Add(time.Duration(arg) * time.Millisecond)
			case 7: // and back; far back once in a while, before the epoch
				now = now.Add(-time.Duration(arg%32) * time.Millisecond)
				if arg == 255 {
					now = time.Unix(-2, 0)
				}
			case 8:
				primary.down.Store(arg%2 == 1)
			}
			if err != nil && !sentinel(err) {
				t.Fatalf("%s: an error wrapping no sentinel: %v", what, err)
			}
		}
	}
}

// sentinel reports an error a caller can act on: one of the sentinels.
func sentinel(err error) bool {
	for _, s := range []error{ratelimit.ErrInvalidCost, ratelimit.ErrInvalidArgument, ratelimit.ErrInvalidKey,
		ratelimit.ErrInvalidPolicy, ratelimit.ErrStore} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
