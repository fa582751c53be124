package guard_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/conformance"
	"github.com/ratelimit-go/ratelimit/guard"
)

func newMemory(t testing.TB) *memory.Store {
	s, err := memory.New(memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// While the primary is healthy, the guarded store is the primary: it passes
// the suite, with a fallback or without.
func TestConformanceWhileThePrimaryIsHealthy(t *testing.T) {
	t.Run("with a fallback", func(t *testing.T) {
		conformance.Run(t, conformance.InProcess(func(t *testing.T) backend.Store {
			s, err := guard.New(newMemory(t), guard.WithFallback(newMemory(t), 2))
			require.NoError(t, err)
			return s
		}))
	})
	t.Run("without", func(t *testing.T) {
		conformance.Run(t, conformance.InProcess(func(t *testing.T) backend.Store {
			s, err := guard.New(newMemory(t))
			require.NoError(t, err)
			return s
		}))
	})
}

// flaky is a primary whose server can be made to go away: while down, every
// call fails as a network store's does when its server is gone.
type flaky struct {
	backend.Store
	down  atomic.Bool
	calls atomic.Int64
}

var errGone = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

// Info implements backend.Store: a server's, not the memory store's it
// wraps (in process, which a Limiter would give no time budget).
func (f *flaky) Info() backend.Info { return backend.Info{} }

func (f *flaky) Take(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	f.calls.Add(1)
	if f.down.Load() {
		return backend.Outcome{}, errGone
	}
	return f.Store.Take(ctx, req)
}

func (f *flaky) Refund(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	f.calls.Add(1)
	if f.down.Load() {
		return backend.Outcome{}, errGone
	}
	return f.Store.Refund(ctx, req)
}

func (f *flaky) TakeAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) error {
	f.calls.Add(1)
	if f.down.Load() {
		return errGone
	}
	return f.Store.TakeAll(ctx, reqs, outs)
}

func (f *flaky) PeekAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) error {
	f.calls.Add(1)
	if f.down.Load() {
		return errGone
	}
	return f.Store.PeekAll(ctx, reqs, outs)
}

func (f *flaky) ChargeAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) error {
	f.calls.Add(1)
	if f.down.Load() {
		return errGone
	}
	return f.Store.ChargeAll(ctx, reqs, outs)
}

// transitions records the breaker's state changes.
type transitions struct {
	mu  sync.Mutex
	got []string
}

func (tr *transitions) observe(name string, from, to guard.State) {
	tr.mu.Lock()
	tr.got = append(tr.got, name+": "+from.String()+" -> "+to.String())
	tr.mu.Unlock()
}

func (tr *transitions) list() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.got...)
}

func TestDegradedLocalModeAndRecovery(t *testing.T) {
	const coolDown = 50 * time.Millisecond
	primary := &flaky{Store: newMemory(t)}
	tr := &transitions{}
	s, err := guard.New(primary, guard.WithName("redis"), guard.WithFailures(3), guard.WithCoolDown(coolDown),
		guard.WithFallback(newMemory(t), 4), guard.WithStateObserver(tr.observe))
	require.NoError(t, err)
	l, err := ratelimit.New(s, ratelimit.PerMinute(20))
	require.NoError(t, err)
	ctx := context.Background()

	d, err := l.Allow(ctx, "alice")
	require.NoError(t, err)
	require.Equal(t, ratelimit.SourceStore, d.Source, "a healthy primary decides")

	primary.down.Store(true)
	for i := 1; i <= 3; i++ {
		d, err := l.Allow(ctx, "alice")
		require.NoError(t, err, "call %d: the fallback answers a failed call", i)
		require.Equal(t, ratelimit.SourceFallback, d.Source)
		require.Equal(t, 5, d.Limit, "the fallback decides under this instance's share: 20 / 4")
	}
	require.Equal(t, guard.Open, s.State(), "3 failures in a row opened the breaker")
	calls := primary.calls.Load()
	admitted := 3
	for i := 0; i < 20; i++ {
		d, err := l.Allow(ctx, "alice")
		require.NoError(t, err)
		require.Equal(t, ratelimit.SourceFallback, d.Source)
		if d.Allowed {
			admitted++
		}
	}
	require.Equal(t, calls, primary.calls.Load(), "the open breaker keeps calls from the primary")
	require.Equal(t, 5, admitted, "the fallback never admits more than the share")

	time.Sleep(coolDown + 20*time.Millisecond)
	_, err = l.Allow(ctx, "alice")
	require.NoError(t, err)
	require.Equal(t, calls+1, primary.calls.Load(), "after the cool-down one probe goes to the primary")
	require.Equal(t, guard.Open, s.State(), "the probe failed: open again")

	primary.down.Store(false)
	time.Sleep(coolDown + 20*time.Millisecond)
	d, err = l.Allow(ctx, "alice")
	require.NoError(t, err)
	require.Equal(t, ratelimit.SourceStore, d.Source, "the probe succeeded: the primary decides again")
	require.Equal(t, 2, d.Count, "with the history it held; local counts are not merged")
	require.Equal(t, guard.Closed, s.State())
	require.Equal(t, []string{
		"redis: closed -> open", "redis: open -> half-open", "redis: half-open -> open",
		"redis: open -> half-open", "redis: half-open -> closed",
	}, tr.list())
}

func TestWithoutAFallbackTheLimitersFailureModeAnswers(t *testing.T) {
	primary := &flaky{Store: newMemory(t)}
	primary.down.Store(true)
	s, err := guard.New(primary, guard.WithFailures(2))
	require.NoError(t, err)
	closed, err := ratelimit.New(s, ratelimit.PerMinute(5))
	require.NoError(t, err)
	open, err := ratelimit.New(s, ratelimit.PerMinute(5), ratelimit.WithFailOpen())
	require.NoError(t, err)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		_, err := closed.Allow(ctx, "k")
		require.ErrorIs(t, err, errGone, "the primary's own error while the breaker is closed")
	}
	calls := primary.calls.Load()
	_, err = closed.Allow(ctx, "k")
	require.ErrorIs(t, err, guard.ErrOpen)
	require.ErrorIs(t, err, ratelimit.ErrStore)
	d, err := open.Allow(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, ratelimit.SourceFailOpen, d.Source)
	require.Equal(t, calls, primary.calls.Load(), "answered without calling the primary")
}

func TestACallerThatLeftIsNotAFailure(t *testing.T) {
	primary := &flaky{Store: newMemory(t)}
	s, err := guard.New(primary, guard.WithFailures(1), guard.WithFallback(newMemory(t), 1))
	require.NoError(t, err)
	l, err := ratelimit.New(s, ratelimit.PerMinute(5))
	require.NoError(t, err)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = l.Allow(gone, "k")
	require.ErrorIs(t, err, context.Canceled, "the caller gets its own error, not a fallback decision")
	require.Equal(t, guard.Closed, s.State(), "and the breaker stays closed")
}

func TestMultiThroughTheGuard(t *testing.T) {
	primary := &flaky{Store: newMemory(t)}
	s, err := guard.New(primary, guard.WithFailures(1), guard.WithFallback(newMemory(t), 1))
	require.NoError(t, err)
	perSecond, _ := ratelimit.New(s, ratelimit.PerSecond(2), ratelimit.WithPrefix("s:"))
	perHour, _ := ratelimit.New(s, ratelimit.PerHour(3), ratelimit.WithPrefix("h:"))
	m, err := ratelimit.NewMulti(perSecond, perHour)
	require.NoError(t, err)
	ctx := context.Background()
	d, err := m.Allow(ctx, "k", "k")
	require.NoError(t, err)
	require.Equal(t, ratelimit.SourceStore, d.Source)
	require.Equal(t, int64(1), primary.calls.Load(), "one atomic call for both policies")

	primary.down.Store(true)
	for i := 0; i < 3; i++ {
		d, err = m.Allow(ctx, "k", "k")
		require.NoError(t, err)
		require.Equal(t, ratelimit.SourceFallback, d.Source)
		require.Equal(t, i < 2, d.Allowed, "request %d: the local per-second limit", i)
	}
	h, err := perHour.Peek(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, ratelimit.SourceFallback, h.Source)
	require.Equal(t, 2, h.Count, "the denial took nothing from the local per-hour count")
}

func TestBadConfigurationIsRefused(t *testing.T) {
	m := newMemory(t)
	for name, opts := range map[string][]guard.Option{
		"nil fallback":          {guard.WithFallback(nil, 2)},
		"no instances":          {guard.WithFallback(m, 0)},
		"negative instances":    {guard.WithFallback(m, -1)},
		"no failures":           {guard.WithFailures(0)},
		"no cool-down":          {guard.WithCoolDown(0)},
		"negative cool-down":    {guard.WithCoolDown(-time.Second)},
		"local share, no store": {guard.WithLocalShare(func(limit, burst int64) (int64, int64) { return limit, burst })},
	} {
		_, err := guard.New(m, opts...)
		require.ErrorIs(t, err, ratelimit.ErrInvalidArgument, name)
		require.True(t, strings.HasPrefix(err.Error(), "ratelimit/guard: "), "%s: %v: the package first", name, err)
	}
	_, err := guard.New(nil)
	require.ErrorIs(t, err, ratelimit.ErrInvalidArgument, "nil primary")
	require.True(t, strings.HasPrefix(err.Error(), "ratelimit/guard: "), "%v", err)

	// A local share out of bounds fails the call, and changes nothing.
	primary := &flaky{Store: m}
	primary.down.Store(true)
	s, err := guard.New(primary, guard.WithFallback(newMemory(t), 1),
		guard.WithLocalShare(func(limit, burst int64) (int64, int64) { return 0, burst }))
	require.NoError(t, err)
	l, _ := ratelimit.New(s, ratelimit.PerMinute(5))
	_, err = l.Allow(context.Background(), "k")
	require.ErrorIs(t, err, ratelimit.ErrInvalidPolicy)
}

// WithLocalShare sets the limit and burst the fallback decides by, from the
// rule's.
func TestTheLocalShareDecidesWhileThePrimaryIsDown(t *testing.T) {
	primary := &flaky{Store: newMemory(t)}
	primary.down.Store(true)
	s, err := guard.New(primary, guard.WithFailures(1), guard.WithFallback(newMemory(t), 1),
		guard.WithLocalShare(func(limit, burst int64) (int64, int64) { return limit - 3, burst }))
	require.NoError(t, err)
	l, err := ratelimit.New(s, ratelimit.PerMinute(5))
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 3 {
		d, err := l.Allow(ctx, "k")
		require.NoError(t, err)
		require.Equal(t, i < 2, d.Allowed, "request %d under a local limit of 5-3", i+1)
		require.Equal(t, ratelimit.SourceFallback, d.Source)
		require.Equal(t, 2, d.Limit)
	}
}

// stalled is a primary that answers nothing until its call's context is
// done, then fails as a client whose own timer fired first does: with an
// error of its own that does not wrap the context's.
type stalled struct{ backend.Store }

// Info implements backend.Store: a server's (see flaky.Info).
func (stalled) Info() backend.Info { return backend.Info{} }

func (stalled) Take(ctx context.Context, _ backend.Request) (backend.Outcome, error) {
	<-ctx.Done()
	return backend.Outcome{}, errors.New("read tcp 127.0.0.1:50000->127.0.0.1:6379: i/o timeout")
}

func (s stalled) TakeAll(ctx context.Context, _ []backend.Request, _ []backend.Outcome) error {
	_, err := s.Take(ctx, backend.Request{})
	return err
}

// A caller's own deadline passing during the primary's call says nothing
// of the primary: the caller gets its error, and the breaker hears nothing
// (a client with a 300 µs deadline against a healthy Redis got fallback
// answers, and opened the breaker for everyone). The Limiter's budget
// running out is the primary's failure.
func TestACallersDeadlineIsNotThePrimarysFailure(t *testing.T) {
	g, err := guard.New(stalled{newMemory(t)}, guard.WithFailures(1), guard.WithFallback(newMemory(t), 1))
	require.NoError(t, err)
	l, err := ratelimit.New(g, ratelimit.PerMinute(5), ratelimit.WithTimeout(time.Minute))
	require.NoError(t, err)
	m, err := ratelimit.NewMulti(l, l)
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
		_, err = l.Allow(ctx, "k")
		require.ErrorIs(t, err, ratelimit.ErrStore, "call %d", i)
		_, err = m.Allow(ctx, "k", "other")
		require.Error(t, err, "Multi, call %d", i)
		cancel()
		require.Equal(t, guard.Closed, g.State(), "call %d: the caller's deadline opens nothing", i)
	}

	budgeted, err := ratelimit.New(g, ratelimit.PerMinute(5), ratelimit.WithTimeout(2*time.Millisecond))
	require.NoError(t, err)
	d, err := budgeted.Allow(context.Background(), "k")
	require.NoError(t, err)
	require.Equal(t, ratelimit.SourceFallback, d.Source, "the budget ran out in the primary's call")
	require.Equal(t, guard.Open, g.State())
}

// ranThenFailed is a primary whose every n-th Take is decided, recorded if
// admitted, and then fails, as a script the server ran does when its reply
// comes after the budget: the guard cannot tell, and its fallback decides
// that request again.
type ranThenFailed struct {
	backend.Store
	n     int64
	calls atomic.Int64
}

// Info implements backend.Store: a server's (see flaky.Info).
func (r *ranThenFailed) Info() backend.Info { return backend.Info{} }

func (r *ranThenFailed) Take(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	out, err := r.Store.Take(ctx, req)
	if r.calls.Add(1)%r.n == 0 {
		return backend.Outcome{}, errors.New("read tcp 127.0.0.1:50000->127.0.0.1:6379: i/o timeout")
	}
	return out, err
}

// The bound of a guard with a fallback: the store admits at most its limit,
// and the fallback at most this instance's share, in each window it
// decides, so a key admits at most the limit plus the share per window
// (with -instances 1 in ratelimitd, the share is the whole limit: a fresh
// cluster once admitted 21 under a limit of 20 so, one request's reply
// having come after its budget).
func TestAFallbackAdmitsAtMostItsSharePastTheLimit(t *testing.T) {
	const limit, instances = 20, 2
	primary := &ranThenFailed{Store: newMemory(t), n: 3}
	g, err := guard.New(primary, guard.WithFailures(1000), guard.WithFallback(newMemory(t), instances))
	require.NoError(t, err)
	clock := conformance.NewManualClock(time.Unix(1_800_000_000, 0))
	l, err := ratelimit.New(g, ratelimit.PerMinute(limit), ratelimit.WithCallerClock(clock.Now))
	require.NoError(t, err)
	var times []int64
	for i := 0; i < 3000; i++ {
		clock.Advance(100 * time.Millisecond)
		d, err := l.Allow(context.Background(), "k")
		require.NoError(t, err)
		if d.Allowed {
			times = append(times, d.At.UnixMicro())
		}
	}
	p := ratelimit.PerMinute(limit + limit/instances)
	require.Zero(t, conformance.OverAdmissions(times, p), "%d admitted in %v: at most %d a minute", len(times), 3000*100*time.Millisecond, p.Limit)
	require.Greater(t, conformance.OverAdmissions(times, ratelimit.PerMinute(limit)), 0, "the fallback did admit past the limit: the bound is reached")
}
