package guard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/guard"
)

// A cost over an instance's share once reached the fallback's arithmetic:
// the sliding-window counter divided by zero (costs 3, 5 and 10 of a limit
// of 10 shared by 4 instances), the panic left the memory shard's mutex
// locked, and every later call on any key of that shard blocked for good.
// Now every algorithm, at every cost up to the limit and every share under
// it, answers with a decision (a cost within the share) or an error wrapping
// ErrInvalidCost (a cost over it, which no failure mode admits), and the
// shard stays free.
func TestDegradedModeNeverPanicsNorHangs(t *testing.T) {
	const limit = 10
	for _, alg := range backend.Algorithms() {
		for _, instances := range []int{2, 3, 4, 6, 11} {
			t.Run(fmt.Sprintf("%v/%d instances", alg, instances), func(t *testing.T) {
				primary := &flaky{Store: newMemory(t)}
				primary.down.Store(true)
				fallback, err := memory.New(memory.WithSweepInterval(0), memory.WithShards(1)) // every key on one shard
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = fallback.Close() })
				g, err := guard.New(primary, guard.WithFallback(fallback, instances))
				require.NoError(t, err)
				share := max(1, limit/instances)
				for _, failOpen := range []bool{false, true} {
					opts := []ratelimit.Option{ratelimit.WithPrefix(fmt.Sprintf("open=%v:", failOpen))}
					if failOpen {
						opts = append(opts, ratelimit.WithFailOpen())
					}
					l, err := ratelimit.New(g, ratelimit.NewPolicy(alg, limit, time.Second), opts...)
					require.NoError(t, err)
					for cost := 1; cost <= limit; cost++ {
						key := fmt.Sprint("k", cost)
						d, err := answer(t, fmt.Sprintf("AllowN(%d)", cost), func() (ratelimit.Decision, error) { return l.AllowN(context.Background(), key, cost) })
						switch {
						case errors.Is(err, errPanicked): // reported; whether the shard is still free is checked below
						case cost <= share:
							require.NoError(t, err, "cost %d within the share %d", cost, share)
							require.Equal(t, ratelimit.SourceFallback, d.Source)
							require.True(t, d.Allowed, "cost %d on a fresh key, within the share %d", cost, share)
						default:
							require.ErrorIs(t, err, ratelimit.ErrInvalidCost, "cost %d over the share %d (fail open: %v)", cost, share, failOpen)
							require.False(t, d.Allowed, "never admitted")
						}
						_, err = answer(t, fmt.Sprintf("Refund(%d)", cost), func() (ratelimit.Decision, error) { return l.Refund(context.Background(), key, cost) })
						if cost > share && !errors.Is(err, errPanicked) {
							require.ErrorIs(t, err, ratelimit.ErrInvalidCost, "a refund over the share %d", share)
						}
						// The same key and another of the same shard answer at once.
						for _, k := range []string{key, "other"} {
							_, err := answer(t, fmt.Sprintf("Allow(%q) after a call of cost %d", k, cost), func() (ratelimit.Decision, error) { return l.Allow(context.Background(), k) })
							require.NoError(t, err, "key %q after a call of cost %d", k, cost)
						}
					}
				}
			})
		}
	}
}

var errPanicked = errors.New("panicked")

// answer runs call on a goroutine of its own and returns what it returned,
// failing the test (rather than crashing the run) on a panic, which it
// returns as errPanicked, and on a call that blocks: a lock left held never
// answers, a busy machine does within the deadline.
func answer(t *testing.T, what string, call func() (ratelimit.Decision, error)) (ratelimit.Decision, error) {
	t.Helper()
	type result struct {
		d   ratelimit.Decision
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r = result{err: fmt.Errorf("%w: %v", errPanicked, p)}
			}
			done <- r
		}()
		r.d, r.err = call()
	}()
	select {
	case r := <-done:
		if errors.Is(r.err, errPanicked) {
			t.Errorf("%s: %v", what, r.err)
		}
		return r.d, r.err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s blocked: a lock was left held", what)
	}
	return ratelimit.Decision{}, nil
}

// The fallback answers whenever the primary could not, the Limiter's own
// budget running out included: with WithTimeout(1ns) the budget is spent
// before the guard is reached, and 100 of 100 calls once failed with
// context.DeadlineExceeded, none answered by the fallback. A caller's own
// deadline or cancellation still gets the context's error.
func TestTheFallbackAnswersWhenTheLimitersBudgetRanOut(t *testing.T) {
	primary := &flaky{Store: newMemory(t)}
	primary.down.Store(true)
	g, err := guard.New(primary, guard.WithFallback(newMemory(t), 2))
	require.NoError(t, err)
	l, err := ratelimit.New(g, ratelimit.PerMinute(1000), ratelimit.WithTimeout(time.Nanosecond))
	require.NoError(t, err)
	m, err := ratelimit.NewMulti(l)
	require.NoError(t, err)
	for i := 0; i < 100; i++ {
		d, err := l.Allow(context.Background(), fmt.Sprint("k", i%7))
		require.NoError(t, err, "call %d", i)
		require.Equal(t, ratelimit.SourceFallback, d.Source, "call %d", i)
		md, err := m.Allow(context.Background(), fmt.Sprint("k", i%7))
		require.NoError(t, err, "Multi, call %d", i)
		require.Equal(t, ratelimit.SourceFallback, md.Source, "Multi, call %d", i)
	}

	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err = l.Allow(expired, "k")
	require.ErrorIs(t, err, context.DeadlineExceeded, "the caller's own deadline")
	gone, cancelGone := context.WithCancel(context.Background())
	cancelGone()
	_, err = l.Allow(gone, "k")
	require.ErrorIs(t, err, context.Canceled, "the caller went away")
}
