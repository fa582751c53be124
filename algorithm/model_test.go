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

type state interface {
	Take(now int64, r algorithm.Rate, n int64) algorithm.Outcome
	Peek(now int64, r algorithm.Rate, n int64) algorithm.Outcome
	Refund(now int64, r algorithm.Rate, n int64) (algorithm.Outcome, bool)
}

// Every algorithm agrees with the reference model on random traffic,
// including clocks that step back (a little, as skewed callers do, and an
// hour, as a stepped clock does), refunds and policy changes.
func TestTheAlgorithmsMatchTheModel(t *testing.T) {
	for _, alg := range ratelimit.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			for seed := int64(1); seed <= 4; seed++ {
				matchTheModel(t, alg, seed)
			}
		})
	}
}

func matchTheModel(t *testing.T, alg ratelimit.Algorithm, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	model := conformance.NewModel()
	states := map[ratelimit.Algorithm]state{ratelimit.SlidingWindow: &algorithm.Log{}, ratelimit.FixedWindow: &algorithm.Fixed{},
		ratelimit.SlidingWindowCounter: &algorithm.SlidingCounter{}, ratelimit.GCRA: &algorithm.Bucket{}}
	st := states[alg]
	now := time.UnixMicro(1_700_000_000_000_000)
	policy := func() ratelimit.Policy {
		p := ratelimit.Policy{Limit: 1 + rng.Intn(8), Window: time.Duration(1+rng.Intn(300)) * time.Millisecond, Algorithm: alg}
		if rng.Intn(3) == 0 {
			p.Window += time.Duration(rng.Intn(1000)) * time.Microsecond // not a whole number of ms
		}
		if alg == ratelimit.GCRA {
			p.Burst = 1 + rng.Intn(8)
		}
		return p
	}
	p := policy()
	p.Limit, p.Window = 5, 100*time.Millisecond
	for i := 0; i < 20000; i++ {
		switch r := rng.Intn(1000); {
		case r == 0:
			now = now.Add(time.Hour)
		case r == 1:
			now = now.Add(-time.Hour)
		default:
			now = now.Add(time.Duration(rng.Intn(40_000)-5_000) * time.Microsecond)
		}
		if rng.Intn(200) == 0 {
			p = policy()
		}
		req := ratelimit.Request{Key: ratelimit.Key{Prefix: "p:", ID: "k"}, Policy: p, Cost: 1 + rng.Intn(p.MaxCost()),
			Clock: ratelimit.CallerClock, Now: now}
		nowUS, r, n := algorithm.Micros(now), algorithm.RateOf(p), int64(req.Cost)
		var want, got ratelimit.Decision
		switch k := rng.Intn(10); {
		case k < 2:
			want, got = model.Peek(req), st.Peek(nowUS, r, n).Decision(p.MaxCost())
		case k < 3:
			var wantOK, gotOK bool
			want, wantOK = model.Refund(req)
			out, gotOK := st.Refund(nowUS, r, n)
			require.Equal(t, wantOK, gotOK, "seed %d step %d: refund %+v", seed, i, req)
			if gotOK {
				got = out.Decision(p.MaxCost())
			}
		default:
			want, got = model.Take(req), st.Take(nowUS, r, n).Decision(p.MaxCost())
		}
		require.Equal(t, want, got, "seed %d step %d: %+v", seed, i, req)
	}
}
