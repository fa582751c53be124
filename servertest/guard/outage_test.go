package guard_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/conformance"
	"github.com/ratelimit-go/ratelimit/guard"
	"github.com/ratelimit-go/ratelimit/servertest/storetest"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// The servers' tests stop servers on purpose; storetest.Main silences the
// clients' logs of it.
func TestMain(m *testing.M) { storetest.Main(m) }

// TestDegradedLocalMode runs the degraded local mode against real servers,
// through both clients, that stall, die and come back, or were never there.
func TestDegradedLocalMode(t *testing.T) {
	for _, c := range storetest.Clients {
		t.Run(c.Name, func(t *testing.T) { guarded(t, c.Kind, c.New) })
	}
}

// guarded runs the outages against a server of kind.
func guarded(t *testing.T, kind testserver.Kind, newStore storetest.NewStore) {
	t.Run("a stalled server: the fallback answers within the budget, then the server again", func(t *testing.T) {
		outage(t, kind, newStore, (*testserver.Server).Pause, (*testserver.Server).Resume)
	})
	t.Run("a killed server: the fallback answers, then the restarted server", func(t *testing.T) {
		outage(t, kind, newStore, (*testserver.Server).Kill, (*testserver.Server).Restart)
	})
	t.Run("a server never there: the fallback answers from the first call", func(t *testing.T) { neverThere(t, kind, newStore) })
}

// The outage's settings: a limit of 10 per 200ms shared by 2 instances (a
// share of 5), a breaker opening after 3 failures with a cool-down of
// 200ms, a time budget of 50ms, 16 goroutines over 4 keys.
const (
	outageLimit     = 10
	outageWindow    = 200 * time.Millisecond
	outageInstances = 2
	outageFailures  = 3
	outageCoolDown  = 200 * time.Millisecond
	outageBudget    = ratelimit.DefaultTimeout // a healthy server under -race on a loaded machine missed 50ms
	outageMargin    = 150 * time.Millisecond
	outageWorkers   = 16
	// slowCall is a call that waited on the server: half its budget. A
	// local answer takes microseconds, but on a loaded 2-core machine under
	// -race a few take over 10ms (CI once counted 32 against a bound of 28).
	slowCall   = outageBudget / 2
	outageKeys = 4
)

// guardedLimiter is a Limiter on a guard over the server at addr, with a
// memory fallback, and the guard: outageLimit per window.
func guardedLimiter(t *testing.T, primary backend.Store, window time.Duration) (*ratelimit.Limiter, *guard.Store) {
	local, err := memory.New(memory.WithSweepInterval(0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = local.Close() })
	g, err := guard.New(primary, guard.WithFailures(outageFailures), guard.WithCoolDown(outageCoolDown),
		guard.WithFallback(local, outageInstances))
	require.NoError(t, err)
	return storetest.Limiter(t, g, ratelimit.Policy{Limit: outageLimit, Window: window}, storetest.Prefix(), ratelimit.WithTimeout(outageBudget)), g
}

// noLeaks fails t if goroutines started during it outlive it (checked after
// every other cleanup, which closes the clients). Clients may take a moment
// to wind down (go-redis's pool re-dials after a second's sleep): the check
// waits up to 3s for them.
func noLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		for wait := time.Now().Add(3 * time.Second); goleak.Find(ignore) != nil && time.Now().Before(wait); {
			time.Sleep(50 * time.Millisecond)
		}
		goleak.VerifyNone(t, ignore)
	})
}

// calls is what a phase of load saw.
type calls struct {
	mu       sync.Mutex
	n        int
	bySource map[ratelimit.Source]int
	slow     int // calls that took more than slowCall
	slowest  time.Duration
	noise    time.Duration // the scheduling noise meanwhile (see startNoise)
	errs     []error
	local    map[string][]int64 // the fallback's admissions per key, µs
}

// hammer calls Allow from the workers for d, recording what came back.
func hammer(l *ratelimit.Limiter, d time.Duration) *calls {
	c := &calls{bySource: map[ratelimit.Source]int{}, local: map[string][]int64{}}
	noise := testserver.StartNoise()
	defer func() { c.noise = noise.Stop() }()
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := 0; w < outageWorkers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				key := fmt.Sprint("user-", (w+i)%outageKeys)
				began := time.Now()
				dec, err := l.Allow(context.Background(), key)
				took := time.Since(began)
				c.mu.Lock()
				c.n++
				c.slowest = max(c.slowest, took)
				if took > slowCall {
					c.slow++
				}
				if err != nil {
					if len(c.errs) < 5 {
						c.errs = append(c.errs, err)
					}
				} else {
					c.bySource[dec.Source]++
					if dec.Source == ratelimit.SourceFallback && dec.Allowed {
						c.local[key] = append(c.local[key], dec.At.UnixMicro())
					}
				}
				c.mu.Unlock()
				time.Sleep(time.Millisecond) // a little think time: 16 workers at most ~1,000/s each
			}
		}(w)
	}
	wg.Wait()
	return c
}

// outage: load before, during and after an outage that down starts and up
// ends.
func outage(t *testing.T, kind testserver.Kind, newStore storetest.NewStore, down, up func(*testserver.Server) error) {
	noLeaks(t)
	srv := testserver.Own(t, kind)
	l, g := guardedLimiter(t, newStore(t, srv.Addr), outageWindow)

	before := hammer(l, 300*time.Millisecond)
	require.Empty(t, before.errs, "before the outage")
	if before.noise < outageBudget/2 {
		require.Equal(t, before.n, before.bySource[ratelimit.SourceStore], "before the outage the server decides every call")
	} else { // the machine, not the server, can make a call miss its budget
		t.Logf("before the outage, scheduling noise of %v against a budget of %v: %v", before.noise, outageBudget, before.bySource)
		require.GreaterOrEqual(t, before.bySource[ratelimit.SourceStore], before.n*9/10, "before the outage the server decides")
	}

	require.NoError(t, down(srv))
	during := hammer(l, 1500*time.Millisecond)
	require.NoError(t, up(srv))
	back := time.Now()
	t.Logf("outage: %d calls, %v; %d slower than %v, slowest %v; breaker %v", during.n, during.bySource, during.slow, slowCall, during.slowest, g.State())
	require.Empty(t, during.errs, "the fallback answers every call")
	require.LessOrEqual(t, during.slowest, outageBudget+outageMargin+during.noise,
		"the slowest call against the %v budget, a margin of %v and the scheduling noise (%v)", outageBudget, outageMargin, during.noise)
	require.Greater(t, during.bySource[ratelimit.SourceFallback], during.n*9/10, "once the breaker is open the fallback decides")
	// Slow calls: those in flight when the breaker opened, and one probe per
	// cool-down; everything else is answered at local speed.
	require.LessOrEqual(t, during.slow, outageFailures+outageWorkers+int(1500*time.Millisecond/outageCoolDown)+2,
		"calls that waited on the server while the breaker was open")
	share := outageLimit / outageInstances
	for key, times := range during.local {
		require.Zero(t, conformance.OverAdmissions(times, ratelimit.Policy{Limit: share, Window: outageWindow}),
			"%s: the fallback admitted more than its share of %d in some window of %v", key, share, outageWindow)
	}

	// The server decides again, for every call, within a bound: a cool-down
	// for the breaker, and the client's own reconnection (go-redis re-dials
	// a refused address once a second).
	const bound = 3 * time.Second
	var recovered, noise time.Duration
	for {
		phase := hammer(l, 100*time.Millisecond)
		if len(phase.errs) == 0 && phase.bySource[ratelimit.SourceStore] == phase.n {
			recovered = time.Since(back)
			break
		}
		noise = max(noise, phase.noise)
		require.Less(t, time.Since(back), bound+noise, "every decision from the server again within %v and the scheduling noise (%v; last phase: %v)", bound, noise, phase.bySource)
	}
	t.Logf("every decision from the server again %v after it returned (cool-down %v)", recovered, outageCoolDown)
	require.Equal(t, guard.Closed, g.State())
}

func neverThere(t *testing.T, kind testserver.Kind, newStore storetest.NewStore) {
	noLeaks(t)
	srv := testserver.Own(t, kind)
	store := newStore(t, srv.Addr) // some clients connect when built
	require.NoError(t, srv.Kill()) // from now on, connection refused
	// A minute's window: the calls before the breaker opens each wait up to
	// the budget, and under load a window of 200ms slid under them.
	l, g := guardedLimiter(t, store, time.Minute)
	for i := 0; i < outageFailures+5; i++ {
		d, err := l.Allow(context.Background(), "user")
		require.NoError(t, err, "call %d", i+1)
		require.Equal(t, ratelimit.SourceFallback, d.Source, "call %d", i+1)
		require.Equal(t, i < outageLimit/outageInstances, d.Allowed, "call %d under a share of %d", i+1, outageLimit/outageInstances)
	}
	require.Equal(t, guard.Open, g.State())
}
