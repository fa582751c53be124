package algorithm_test

import (
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/algorithm"
	"github.com/ratelimit-go/ratelimit/conformance"
)

// The efficient Log and Counter agree with the reference model on random
// traffic, including clocks that step back and policies that change.
func TestLogAndCounterMatchTheModel(t *testing.T) {
	for _, alg := range ratelimit.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			rng := rand.New(rand.NewSource(1))
			model := conformance.NewModel()
			var log algorithm.Log
			var counter algorithm.Counter
			now := time.UnixMicro(1_700_000_000_000_000)
			policy := ratelimit.Policy{Limit: 5, Window: 100 * time.Millisecond, Algorithm: alg}
			for i := 0; i < 20000; i++ {
				now = now.Add(time.Duration(rng.Intn(40)-5) * time.Millisecond)
				if rng.Intn(200) == 0 {
					policy.Limit = 1 + rng.Intn(8)
					policy.Window = time.Duration(1+rng.Intn(300)) * time.Millisecond
				}
				req := ratelimit.Request{Key: ratelimit.Key{Prefix: "p:", ID: "k"}, Policy: policy, Cost: 1 + rng.Intn(policy.Limit),
					Clock: ratelimit.CallerClock, Now: now}
				peek := rng.Intn(4) == 0
				nowUS, window := algorithm.Micros(now), algorithm.WindowMicros(policy)
				var want ratelimit.Decision
				var out algorithm.Outcome
				switch {
				case peek && alg == ratelimit.FixedWindow:
					want, out = model.Peek(req), counter.Peek(nowUS, window, policy.Limit, req.Cost)
				case alg == ratelimit.FixedWindow:
					want, out = model.Take(req), counter.Take(nowUS, window, policy.Limit, req.Cost)
				case peek:
					want, out = model.Peek(req), log.Peek(nowUS, window, policy.Limit, req.Cost)
				default:
					want, out = model.Take(req), log.Take(nowUS, window, policy.Limit, req.Cost)
				}
				require.Equal(t, want, out.Decision(policy.Limit), "step %d (peek %v): %+v", i, peek, req)
			}
		})
	}
}
