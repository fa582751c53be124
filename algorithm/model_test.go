package algorithm_test

import (
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/algorithm"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/conformance"
)

// ruleOf is p compiled, as a Limiter compiles it.
func ruleOf(t *testing.T, p ratelimit.Policy) *backend.Rule {
	t.Helper()
	r, err := backend.NewRule(p.Algorithm, int64(p.Limit), p.Window, int64(p.Burst), p.Window, "p:")
	require.NoError(t, err)
	return r
}

// answer is out as a store answers it.
func answer(out algorithm.Outcome) backend.Outcome { return out }

type state interface {
	Take(now int64, r algorithm.Rate, n int64) (algorithm.Outcome, algorithm.Effect)
	Peek(now int64, r algorithm.Rate, n int64) algorithm.Outcome
	Refund(now int64, r algorithm.Rate, n int64) (algorithm.Outcome, algorithm.Effect, bool)
	Charge(now int64, r algorithm.Rate, n int64) (algorithm.Outcome, algorithm.Effect)
	Undo(now, at int64, r algorithm.Rate, n int64) (algorithm.Outcome, algorithm.Effect)
}

// take is st.Take's outcome.
func take(st state, now int64, r algorithm.Rate, n int64) algorithm.Outcome {
	out, _ := st.Take(now, r, n)
	return out
}

// Every algorithm agrees with the reference model on random traffic,
// including clocks that step back (a little, as skewed callers do, and an
// hour, as a stepped clock does), refunds, charges past the limit, undoing
// earlier admissions, and policy changes.
func TestTheAlgorithmsMatchTheModel(t *testing.T) {
	for _, alg := range backend.Algorithms() {
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
	var admitted []int64 // the times of recent admissions, to undo
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
		rule := ruleOf(t, p)
		req := backend.Request{Rule: rule, Key: "k", Cost: int64(1 + rng.Intn(p.MaxCost())), Now: now.UnixMicro()}
		nowUS, r, n := req.Now, rule.Rate(), req.Cost
		var want, got backend.Outcome
		switch k := rng.Intn(14); {
		case k < 2:
			want, got = model.Peek(req), answer(st.Peek(nowUS, r, n))
		case k < 4: // a charge, up to three times what a request may cost
			req.Cost = int64(1 + rng.Intn(3*p.MaxCost()))
			want = model.Charge(req)
			got, _ = st.Charge(nowUS, r, req.Cost)
		case k < 5 && len(admitted) > 0: // undo an admission, often not the newest
			req.Admitted = admitted[rng.Intn(len(admitted))]
			want, _ = model.Refund(req)
			got, _ = st.Undo(nowUS, req.Admitted, r, n)
		case k < 3:
			var wantOK, gotOK bool
			want, wantOK = model.Refund(req)
			out, _, gotOK := st.Refund(nowUS, r, n)
			require.Equal(t, wantOK, gotOK, "seed %d step %d: refund %+v", seed, i, req)
			if gotOK {
				got = answer(out)
			}
		default:
			want, got = model.Take(req), answer(take(st, nowUS, r, n))
			if got.Allowed() {
				admitted = append(admitted[max(0, len(admitted)-7):], got.At)
			}
		}
		require.Equal(t, want, got, "seed %d step %d: %+v", seed, i, req)
	}
}

// The sliding window counter is held to its stated bound: in the window
// ending at each admission, at most Limit + floor(p*e/Window). Under the
// worst traffic (a whole window's quota at the very end of the previous
// window, then requests as fast as admitted) it comes close to twice the
// limit, which is why the bound is stated; under random traffic it stays
// near the limit.
func TestSlidingCounterStaysWithinItsBound(t *testing.T) {
	const limit, window = 100, int64(1_000_000)
	p := ratelimit.NewPolicy(ratelimit.SlidingWindowCounter, limit, time.Second)
	r := ruleOf(t, p).Rate()
	worst := func(times []int64) int { // the most admissions in any interval of one window
		most := 0
		for j := range times {
			i := j
			for i > 0 && times[i-1] > times[j]-window {
				i--
			}
			most = max(most, j-i+1)
		}
		return most
	}

	var c algorithm.SlidingCounter
	var times []int64
	at := 10*window - 1 // the last µs of a window
	for i := 0; i < limit; i++ {
		require.True(t, take(&c, at, r, 1).Allowed())
		times = append(times, at)
	}
	for now := 10 * window; now < 11*window; now += 100 {
		if take(&c, now, r, 1).Allowed() {
			times = append(times, now)
		}
	}
	require.Zero(t, conformance.OverAdmissions(times, p), "adversarial traffic stays within the bound")
	adversarial := worst(times)
	require.Greater(t, adversarial, limit+limit/2, "and the bound is no formality: it comes close to 2*limit")
	require.Less(t, adversarial, 2*limit)

	rng := rand.New(rand.NewSource(3))
	c, times = algorithm.SlidingCounter{}, nil
	for now := int64(0); now < 50*window; now += int64(rng.Intn(20_000)) {
		if take(&c, now, r, 1).Allowed() {
			times = append(times, now)
		}
	}
	require.Zero(t, conformance.OverAdmissions(times, p))
	t.Logf("the most admitted in one window: %d under the worst traffic, %d under random traffic, for a limit of %d", adversarial, worst(times), limit)
}
