package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// history: 5 requests per 500ms, then SetPolicy to 5 per 10s, and 2.5s
// later the 5 requests must still count. Their keys were once written with
// a TTL of the old window plus a second, so the server dropped them and the
// next request was admitted with a count of 1; with WithRetention the TTL
// covers the longer window. On the server's clock, in real time.
func history(t *testing.T, addr string, newStore NewStore) {
	const wait = 2500 * time.Millisecond // past every TTL the old policy set
	if left := 10*time.Second - time.Duration(time.Now().UnixNano())%(10*time.Second); left < wait+time.Second {
		time.Sleep(left) // a fixed window of 10s must not end during the check
	}
	var wg sync.WaitGroup
	for _, alg := range backend.Algorithms() {
		wg.Add(1)
		go func() { // in parallel: one wait for all
			defer wg.Done()
			l := Limiter(t, newStore(t, addr), ratelimit.NewPolicy(alg, 5, 500*time.Millisecond), Prefix(), ratelimit.WithRetention(10*time.Second))
			ctx := context.Background()
			var at []time.Time // when the server decided each
			for i := 0; i < 5; i++ {
				d, err := l.Allow(ctx, "user")
				if !assertNoError(t, err) || !d.Allowed {
					t.Errorf("%v: request %d of 5 denied", alg, i+1)
					return
				}
				at = append(at, d.At)
			}
			// A fixed window keeps the count of the last 500ms window the
			// five reached: all five, unless a loaded machine spread them
			// over a boundary.
			kept := 0
			for _, a := range at {
				if a.Truncate(500 * time.Millisecond).Equal(at[4].Truncate(500 * time.Millisecond)) {
					kept++
				}
			}
			if err := l.SetPolicy(ratelimit.NewPolicy(alg, 5, 10*time.Second)); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(wait)
			d, err := l.Allow(ctx, "user")
			if !assertNoError(t, err) {
				return
			}
			switch {
			case alg == ratelimit.GCRA: // at 5 per 10s, 2.5s drained 1.25 of the 5
				if !d.Allowed || d.Count != 5 {
					t.Errorf("%v: %+v, want admitted with a count of 5", alg, d)
				}
			case alg == ratelimit.FixedWindow && d.At.Truncate(10*time.Second).After(at[4].Truncate(500*time.Millisecond)):
				if !d.Allowed || d.Count != 1 { // a loaded machine reached the next 10s window: a fresh count
					t.Errorf("%v: %+v, want admitted with a count of 1 in a new 10s window", alg, d)
				}
			case alg == ratelimit.FixedWindow && kept < 5:
				if !d.Allowed || d.Count != kept+1 {
					t.Errorf("%v: %+v, want admitted with a count of %d: the %d of the last 500ms window are in the 10s window", alg, d, kept+1, kept)
				}
			case d.Allowed || d.Count != 5:
				t.Errorf("%v: %+v, want denied with a count of 5: the history is in the 10s window", alg, d)
			}
		}()
	}
	wg.Wait()
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// largestDecision fills a sliding log at MaxLogLimit with entries of cost 1,
// all made at one instant, so that the next decision, a window later, prunes
// every one of them: the most work one decision can do; then fills it again
// and refunds all 10,000 units at once, dropping every entry (one of them of
// cost 2, so that the refund reads the cost of each). (A cost of
// 1,000,000 once wrote a million entries in one script, and the server
// answered nobody else for 3.5s.) Meanwhile another client pings the server:
// the slowest answer must come within blockBound, plus the scheduling noise
// measured meanwhile; the figures are logged. The Limiter's budget is
// generous: the fill checks counts, not speed.
func largestDecision(t *testing.T, addr string, newStore NewStore) {
	ctx := context.Background()
	at := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
	pre := Prefix()
	l := Limiter(t, newStore(t, addr), ratelimit.PerHour(ratelimit.MaxLogLimit), pre, ratelimit.WithCallerClock(clock))
	a := Admin(t, addr)
	log := keysOf(t, pre, "heavy", l.Policy())[0]
	fill := func(first int) { // a first request of cost first, then requests of cost 1 up to the limit
		d, err := l.AllowN(ctx, "heavy", first)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		var admitted, failed atomic.Int64
		var firstErr atomic.Value
		admitted.Add(int64(first))
		var wg sync.WaitGroup
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < ratelimit.MaxLogLimit/16; i++ {
					d, err := l.Allow(ctx, "heavy")
					switch {
					case err != nil:
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					case d.Allowed:
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		require.Zero(t, failed.Load(), "calls that failed while filling the log; the first: %v", firstErr.Load())
		require.EqualValues(t, ratelimit.MaxLogLimit, admitted.Load())
		require.EqualValues(t, ratelimit.MaxLogLimit-first+1, a.ZCard(ctx, log).Val())
	}

	fill(1)
	var d ratelimit.Decision
	var err error
	took, slowest, pings, late := whilePinging(t, addr, func() {
		mu.Lock()
		at = at.Add(time.Hour) // every entry leaves: the next decision prunes 10,000
		mu.Unlock()
		d, err = l.AllowN(ctx, "heavy", ratelimit.MaxLogLimit) // and records the largest cost: one entry
	})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.EqualValues(t, 1, a.ZCard(ctx, log).Val(), "a cost of %d is one entry", ratelimit.MaxLogLimit)
	t.Logf("the decision pruning %d entries took %v; %d pings meanwhile, the slowest %v (scheduling noise %v)", ratelimit.MaxLogLimit, took, pings, slowest, late)
	require.Less(t, slowest, blockBound+late, "the server kept answering other clients")

	require.NoError(t, l.Reset(ctx, "heavy"))
	fill(2) // one entry of cost 2: the refund reads every entry's cost

	took, slowest, pings, late = whilePinging(t, addr, func() { d, err = l.Refund(ctx, "heavy", ratelimit.MaxLogLimit) })
	require.NoError(t, err)
	require.Zero(t, d.Count)
	require.Zero(t, a.ZCard(ctx, log).Val(), "every entry refunded")
	t.Logf("the refund of %d entries (one of cost 2) took %v; %d pings meanwhile, the slowest %v (scheduling noise %v)", ratelimit.MaxLogLimit, took, pings, slowest, late)
	require.Less(t, slowest, blockBound+late, "the server kept answering other clients")
}

// blockBound is how long the largest decision may keep the server from
// answering others: far below the seconds a script that grows with the
// cost held it, and far above what the largest decision takes even on a
// machine so loaded that the server itself waits for a CPU (the noise this
// process measures is not the server's).
const blockBound = 500 * time.Millisecond

// whilePinging runs do while another client pings the server at addr, and
// reports how long do took, the slowest ping, how many there were and the
// scheduling noise meanwhile.
func whilePinging(t *testing.T, addr string, do func()) (took, slowest time.Duration, pings int, late time.Duration) {
	ctx := context.Background()
	noise := testserver.StartNoise()
	defer func() { late = noise.Stop() }()
	p := Admin(t, addr)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			began := time.Now()
			if err := p.Ping(ctx).Err(); err != nil {
				t.Error(err)
				return
			}
			pings++
			slowest = max(slowest, time.Since(began))
		}
	}()
	time.Sleep(20 * time.Millisecond)
	began := time.Now()
	do()
	took = time.Since(began)
	time.Sleep(20 * time.Millisecond)
	close(stop)
	<-done
	return took, slowest, pings, 0 // late: set by the deferred stop
}
