package httplimit_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/internal/counted"
	"github.com/ratelimit-go/ratelimit/internal/frontend"
)

// charges counts the charges a Limiter's observer sees.
type charges struct{ n atomic.Int64 }

func (c *charges) Observe(_ context.Context, e ratelimit.Event) {
	if e.Op == ratelimit.OpCharge {
		c.n.Add(1)
	}
}

// A token budget behind a handler that reports its usage: each request is
// checked against the budget (taking nothing), the handler reports the
// tokens its response used, and the middleware charges them once it
// returns; the request that finds the budget spent gets 429, and takes
// nothing from the request limit beside it. A request that reports nothing
// costs no charge. (A rule once cost 1 per request, with no way to check
// without taking nor to charge after the response.)
func TestAUsageRuleChargesWhatTheHandlerReports(t *testing.T) {
	s := memoryStore(t)
	seen := &charges{}
	tokens := limiter(t, s, ratelimit.NewPolicy(ratelimit.FixedWindow, 1000, time.Minute), ratelimit.WithName("tokens"),
		ratelimit.WithPrefix("tok:"), ratelimit.WithObserver(seen))
	requests := limiter(t, s, ratelimit.NewPolicy(ratelimit.FixedWindow, 100, time.Minute), ratelimit.WithName("requests"), ratelimit.WithPrefix("req:"))
	user := func(r *http.Request) (string, error) { return r.Header.Get("User"), nil }
	m, err := httplimit.New([]httplimit.Rule{{Limiter: requests, Key: user}, {Limiter: tokens, Key: user, Usage: true}})
	require.NoError(t, err)
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.Header.Get("Tokens"))
		httplimit.ReportUsage(r.Context(), n) // what the response used, known once it is made
		w.WriteHeader(http.StatusOK)
	})))
	t.Cleanup(srv.Close)

	codes := []int{}
	for range 6 {
		codes = append(codes, get(t, srv.URL, "User", "ann", "Tokens", "300").StatusCode)
	}
	require.Equal(t, []int{200, 200, 200, 200, 429, 429}, codes, "checked at 0, 300, 600, 900: then spent")
	require.Equal(t, int64(4), seen.n.Load(), "a charge for each served request")
	d, err := requests.Peek(context.Background(), "ann")
	require.NoError(t, err)
	require.Equal(t, 4, d.Count, "the checks that found the budget spent took no request")
	d, err = tokens.Peek(context.Background(), "ann")
	require.NoError(t, err)
	require.Equal(t, 1200, d.Count, "1,200 tokens charged")

	require.Equal(t, 200, get(t, srv.URL, "User", "bob").StatusCode)
	require.Equal(t, int64(4), seen.n.Load(), "no usage reported: no charge")
}

// A rule with a Cost reserves it before the handler and settles after: the
// excess charged, what was not used given back (to that admission).
func TestAUsageRuleWithACostReservesThenSettles(t *testing.T) {
	s := memoryStore(t)
	tokens := limiter(t, s, ratelimit.NewPolicy(ratelimit.SlidingWindow, 1000, time.Minute), ratelimit.WithName("tokens"))
	estimate := func(r *http.Request) (int, error) { return strconv.Atoi(r.Header.Get("Estimate")) }
	m, err := httplimit.New([]httplimit.Rule{{Limiter: tokens, Key: func(*http.Request) (string, error) { return "ann", nil }, Cost: estimate, Usage: true}})
	require.NoError(t, err)
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.Header.Get("Tokens"))
		httplimit.ReportUsage(r.Context(), n)
	})))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	count := func() int {
		d, err := tokens.Peek(ctx, "ann")
		require.NoError(t, err)
		return d.Count
	}
	require.Equal(t, 200, get(t, srv.URL, "Estimate", "500", "Tokens", "120").StatusCode)
	require.Equal(t, 120, count(), "500 reserved, 380 given back")
	require.Equal(t, 200, get(t, srv.URL, "Estimate", "100", "Tokens", "400").StatusCode)
	require.Equal(t, 520, count(), "100 reserved, 300 more charged")
	require.Equal(t, 429, get(t, srv.URL, "Estimate", "600", "Tokens", "1").StatusCode, "480 left: the estimate does not fit")
	require.Equal(t, 520, count(), "a denial reserves nothing")
	require.Equal(t, 400, get(t, srv.URL, "Estimate", "5000").StatusCode, "more than the budget could ever hold")
}

// Usage rules that reserved alike (checks, before the work: a minute's
// tokens and a day's) are charged together once it returns, in one call
// of a store that charges several at once, not one each; a rule that
// reserved another cost settles on its own.
func TestUsageRulesAreChargedTogether(t *testing.T) {
	s := counted.New(memoryStore(t))
	minute := limiter(t, s, ratelimit.NewPolicy(ratelimit.FixedWindow, 1000, time.Minute), ratelimit.WithPrefix("m:"))
	day := limiter(t, s, ratelimit.NewPolicy(ratelimit.FixedWindow, 10000, 24*time.Hour), ratelimit.WithPrefix("d:"))
	reserving := limiter(t, s, ratelimit.NewPolicy(ratelimit.SlidingWindow, 1000, time.Minute), ratelimit.WithPrefix("r:"))
	user := func(*http.Request) (string, error) { return "ann", nil }
	m, err := httplimit.New([]httplimit.Rule{{Limiter: minute, Key: user, Usage: true}, {Limiter: day, Key: user, Usage: true},
		{Limiter: reserving, Key: user, Cost: func(*http.Request) (int, error) { return 100, nil }, Usage: true}})
	require.NoError(t, err)
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httplimit.ReportUsage(r.Context(), 300)
	})))
	t.Cleanup(srv.Close)
	require.Equal(t, 200, get(t, srv.URL).StatusCode)
	require.EqualValues(t, 1, s.ChargeAlls.Load(), "the two checks charged in one call")
	require.EqualValues(t, 1, s.Charges.Load(), "the reservation's excess on its own")
	for _, l := range []*ratelimit.Limiter{minute, day, reserving} {
		d, err := l.Peek(context.Background(), "ann")
		require.NoError(t, err)
		require.Equal(t, 300, d.Count, "%v: the usage charged once", l.Policy())
	}
}

// A rule of an InFlight policy holds a permit while the handler runs: with
// two requests in the handler, a third gets 429 with Retry-After, and once
// one leaves, the next gets in. The request the permits denied takes
// nothing from the rate beside them (it once did: the rates decided first).
func TestAnInFlightRuleHoldsAPermitWhileTheHandlerRuns(t *testing.T) {
	s := memoryStore(t)
	jobs := limiter(t, s, ratelimit.Concurrency(2, time.Minute), ratelimit.WithName("jobs"))
	perMinute := limiter(t, s, ratelimit.PerMinute(100), ratelimit.WithName("per-minute"))
	user := func(*http.Request) (string, error) { return "ann", nil }
	m, err := httplimit.New([]httplimit.Rule{{Limiter: jobs, Key: user}, {Limiter: perMinute, Key: user}})
	require.NoError(t, err)
	entered, leave := make(chan struct{}, 4), make(chan struct{})
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-leave
	})))
	t.Cleanup(srv.Close)
	codes := make(chan int, 4)
	for range 2 {
		go func() { codes <- get(t, srv.URL).StatusCode }()
		<-entered
	}
	resp := get(t, srv.URL)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "two in the handler: no permit left")
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	leave <- struct{}{}
	require.Equal(t, http.StatusOK, <-codes)
	go func() { codes <- get(t, srv.URL).StatusCode }()
	<-entered // one left: the next is in
	close(leave)
	require.Equal(t, http.StatusOK, <-codes)
	require.Equal(t, http.StatusOK, <-codes)
	d, err := jobs.Peek(context.Background(), "ann")
	require.NoError(t, err)
	require.Zero(t, d.Count, "every permit given back")
	d, err = perMinute.Peek(context.Background(), "ann")
	require.NoError(t, err)
	require.Equal(t, 3, d.Count, "three requests served; the one the permits denied took nothing from the rate")
}

// meetingRefunds holds each Refund until want are in flight together (or a
// while has passed), and keeps the most it saw in flight; with panics, each
// Refund panics once they have met.
type meetingRefunds struct {
	backend.Store
	want, inFlight, most int
	panics               bool
	mu                   sync.Mutex
	met                  chan struct{}
}

func (m *meetingRefunds) Refund(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	m.mu.Lock()
	m.inFlight++
	m.most = max(m.most, m.inFlight)
	if m.inFlight == m.want {
		close(m.met)
	}
	m.mu.Unlock()
	select {
	case <-m.met:
	case <-time.After(10 * time.Second): // one after another: they never meet
	}
	m.mu.Lock()
	m.inFlight--
	m.mu.Unlock()
	if m.panics {
		panic("a store that breaks its contract")
	}
	return m.Store.Refund(ctx, req)
}

// Two usage rules that reserved an estimate give back its unused part at
// once, not one after another (the response is complete only once they
// are settled). A store that panics there (breaking its contract) panics
// in the handler's goroutine, which net/http recovers, as it did when the
// rules settled one by one, and not in a goroutine of the middleware's,
// which would end the process.
func TestUsageRulesSettleAtOnce(t *testing.T) {
	for _, panics := range []bool{false, true} {
		store := &meetingRefunds{Store: memoryStore(t), want: 2, panics: panics, met: make(chan struct{})}
		minute := limiter(t, store, ratelimit.NewPolicy(ratelimit.SlidingWindow, 1000, time.Minute), ratelimit.WithPrefix("m:"))
		day := limiter(t, store, ratelimit.NewPolicy(ratelimit.SlidingWindow, 10000, 24*time.Hour), ratelimit.WithPrefix("d:"))
		user := func(*http.Request) (string, error) { return "ann", nil }
		estimate := func(*http.Request) (int, error) { return 500, nil }
		m, err := httplimit.New([]httplimit.Rule{{Limiter: minute, Key: user, Cost: estimate, Usage: true}, {Limiter: day, Key: user, Cost: estimate, Usage: true}})
		require.NoError(t, err)
		srv := httptest.NewUnstartedServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			httplimit.ReportUsage(r.Context(), 120)
		})))
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the recovered panic's report
		srv.Start()
		t.Cleanup(srv.Close)
		if panics {
			res, err := http.Get(srv.URL)
			if err == nil {
				res.Body.Close()
			}
			require.Error(t, err, "the handler's panic closed the connection")
			continue
		}
		require.Equal(t, 200, get(t, srv.URL).StatusCode)
		require.Equal(t, 2, store.most, "the two give-backs in flight together")
		for _, l := range []*ratelimit.Limiter{minute, day} {
			d, err := l.Peek(context.Background(), "ann")
			require.NoError(t, err)
			require.Equal(t, 120, d.Count, "500 reserved, 380 given back")
		}
	}
}

// Settling one usage rule (the common case) allocates nothing beyond the
// charge itself and the context that outlives the caller: gathering the
// rules to settle together cost eight allocations a request, one rule or
// not, when the jobs' captures were in Settle's own frame.
func TestSettlingOneUsageRuleAllocatesNothingOfItsOwn(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	l := limiter(t, memoryStore(t), ratelimit.NewPolicy(ratelimit.FixedWindow, 1<<30, time.Hour))
	ctx := context.Background()
	keys, costs := []string{"ann"}, []int{0}
	d := ratelimit.MultiDecision{Decisions: make([]ratelimit.Decision, 1)}
	usage := func(int) (*ratelimit.Limiter, bool) { return l, true }
	charge := testing.AllocsPerRun(200, func() { _, _ = l.Charge(context.WithoutCancel(ctx), "ann", 3) })
	settle := testing.AllocsPerRun(200, func() { frontend.Settle(ctx, 1, usage, keys, costs, d, 3) })
	require.Equal(t, charge, settle)
}
