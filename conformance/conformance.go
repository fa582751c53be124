// Package conformance is the executable specification of a ratelimit.Store.
// Every backend in this module runs it from its tests; so should yours:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t *testing.T) ratelimit.Store {
//			return mystore.New(newClient(t)) // a new client on the same server
//		})
//	}
//
// Run calls newStore one or more times in each subtest. Every Store returned
// within one subtest must share state, as app instances share one server: for
// a network store, return a new client of the same server each time; for an
// in-process store, wrap the constructor with InProcess. Subtests write under
// their own random key prefix, so a server needs no flushing between them;
// release what you open with t.Cleanup.
//
// Most scenarios drive the Limiter with an injected clock (ratelimit.WithClock)
// and compare every Decision, field by field, with algorithm.Model; those that
// test the store's own clock use real time with short windows and explicit
// margins, so the suite also holds on a server that keeps its own time.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	mrand "math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/algorithm"
	"github.com/stretchr/testify/require"
)

// NewStore returns a Store sharing state with every other Store it returned
// in the same test t.
type NewStore func(t *testing.T) ratelimit.Store

// InProcess adapts the constructor of an in-process store, whose instances
// cannot share state: within one test, every call returns the store the first
// call made.
func InProcess(newStore NewStore) NewStore {
	var mu sync.Mutex
	stores := map[*testing.T]ratelimit.Store{}
	return func(t *testing.T) ratelimit.Store {
		mu.Lock()
		defer mu.Unlock()
		if s, ok := stores[t]; ok {
			return s
		}
		s := newStore(t)
		stores[t] = s
		t.Cleanup(func() {
			mu.Lock()
			delete(stores, t)
			mu.Unlock()
		})
		return s
	}
}

// Run runs every scenario against stores from newStore, once for each
// algorithm, as subtests named after the behaviour they require.
func Run(t *testing.T, newStore NewStore) {
	for _, alg := range []ratelimit.Algorithm{ratelimit.SlidingWindow, ratelimit.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) {
					sc.run(t, &env{t: t, newStore: newStore, alg: alg})
				})
			}
		})
	}
}

var scenarios = []struct {
	name string
	run  func(*testing.T, *env)
}{
	{"allows requests within the limit", allowsWithinLimit},
	{"denies the request after the limit and records nothing", deniesAfterLimit},
	{"peek reports the quota without consuming it", peekDoesNotConsume},
	{"frees quota as the window passes", freesQuotaAsWindowPasses},
	{"bursts at a window boundary only with a fixed window", boundaryBurst},
	{"remaining decreases and never goes negative", remainingNeverNegative},
	{"reset restores the full quota", resetRestoresQuota},
	{"a new policy applies to existing keys at once", reconfigureAppliesToExistingKeys},
	{"keys, prefixes and algorithms are isolated", keysAreIsolated},
	{"AllowN consumes its cost", allowNConsumesCost},
	{"retry-after is exact", retryAfterIsExact},
	{"counts every request of the same microsecond", sameMicrosecond},
	{"rejects invalid input and records nothing", rejectsInvalidInput},
	{"a cancelled context returns promptly with an error", cancelledContext},
	{"matches the reference model on random traffic", matchesModel},
	{"never over-admits under concurrency across instances", noOverAdmission},
	{"never over-admits in any window under load (64 goroutines, 4 instances)", noOverAdmissionInAnyWindow},
	{"uses the store's own clock when the request has none", storeClock},
}

// env is what a scenario works with.
type env struct {
	t        *testing.T
	newStore NewStore
	alg      ratelimit.Algorithm
	prefix   string
	clock    *Clock
}

// Clock is a manual clock for ratelimit.WithClock, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock showing now.
func NewClock(now time.Time) *Clock { return &Clock{now: now} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d (which may be negative).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// start is where manual clocks start: a round time, so fixed windows of whole
// seconds start there, and recent, so a server does not expire the keys.
func start() time.Time {
	return time.Now().Truncate(time.Hour).Add(time.Hour)
}

func (e *env) policy(limit int, window time.Duration) ratelimit.Policy {
	return ratelimit.Policy{Limit: limit, Window: window, Algorithm: e.alg}
}

// namespace is the key prefix of the scenario: random, so that scenarios and
// runs never see each other's keys on a shared server.
func (e *env) namespace() string {
	if e.prefix == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		e.prefix = "conformance:" + hex.EncodeToString(b[:]) + ":"
	}
	return e.prefix
}

// limiter returns a Limiter on a new store instance with the scenario's
// manual clock, prefix and a policy of limit per window.
func (e *env) limiter(limit int, window time.Duration, opts ...ratelimit.Option) *ratelimit.Limiter {
	if e.clock == nil {
		e.clock = NewClock(start())
	}
	opts = append([]ratelimit.Option{ratelimit.WithPrefix(e.namespace()), ratelimit.WithClock(e.clock.Now)}, opts...)
	l, err := ratelimit.New(e.newStore(e.t), e.policy(limit, window), opts...)
	require.NoError(e.t, err)
	return l
}

// realTimeLimiter is a limiter that lets the store use its own clock.
func (e *env) realTimeLimiter(limit int, window time.Duration) *ratelimit.Limiter {
	l, err := ratelimit.New(e.newStore(e.t), e.policy(limit, window), ratelimit.WithPrefix(e.namespace()))
	require.NoError(e.t, err)
	return l
}

// clearOfBoundary makes a fixed window on the store's clock last at least
// need more, sleeping into the next window if it would end sooner, so that a
// short burst of calls is decided in one window. Sliding windows have no
// boundary: it returns at once.
func (e *env) clearOfBoundary(l *ratelimit.Limiter, need time.Duration) {
	if e.alg != ratelimit.FixedWindow {
		return
	}
	d, err := l.Peek(context.Background(), "boundary-probe") // an empty key: ResetAt is the window's end
	require.NoError(e.t, err)
	if left := d.ResetAt.Sub(d.At); left < need {
		time.Sleep(left + time.Millisecond)
	}
}

// checker replays every call on the reference model and compares.
type checker struct {
	t     *testing.T
	l     *ratelimit.Limiter
	model *algorithm.Model
	clock *Clock
	ctx   context.Context
}

func (e *env) checked(limit int, window time.Duration) *checker {
	l := e.limiter(limit, window)
	return &checker{t: e.t, l: l, model: algorithm.NewModel(), clock: e.clock, ctx: context.Background()}
}

func (c *checker) request(key string, cost int) ratelimit.Request {
	return ratelimit.Request{Prefix: "m:", Key: key, Policy: c.l.Policy(), Cost: cost, Now: c.clock.Now()}
}

// allowN calls AllowN and requires the model's decision.
func (c *checker) allowN(key string, n int) ratelimit.Decision {
	c.t.Helper()
	want := c.model.Take(c.request(key, n))
	got, err := c.l.AllowN(c.ctx, key, n)
	require.NoError(c.t, err, "AllowN(%q, %d)", key, n)
	require.Equal(c.t, want, got, "AllowN(%q, %d) at %v under %v", key, n, c.clock.Now().Format(time.StampMicro), c.l.Policy())
	return got
}

func (c *checker) allow(key string) ratelimit.Decision { c.t.Helper(); return c.allowN(key, 1) }

func (c *checker) peek(key string) ratelimit.Decision {
	c.t.Helper()
	want := c.model.Take(c.request(key, 0))
	got, err := c.l.Peek(c.ctx, key)
	require.NoError(c.t, err, "Peek(%q)", key)
	require.Equal(c.t, want, got, "Peek(%q) at %v under %v", key, c.clock.Now().Format(time.StampMicro), c.l.Policy())
	return got
}

func (c *checker) reset(key string) {
	c.t.Helper()
	c.model.Reset(c.request(key, 0))
	require.NoError(c.t, c.l.Reset(c.ctx, key), "Reset(%q)", key)
}

func (c *checker) setPolicy(p ratelimit.Policy) {
	c.t.Helper()
	require.NoError(c.t, c.l.SetPolicy(p))
}

func allowsWithinLimit(t *testing.T, e *env) {
	c := e.checked(5, time.Second)
	for i := 1; i <= 5; i++ {
		d := c.allow("user")
		require.True(t, d.Allowed, "request %d of 5", i)
		require.Equal(t, i, d.Count, "count after request %d", i)
		require.Equal(t, 5-i, d.Remaining, "remaining after request %d", i)
		require.Zero(t, d.RetryAfter, "an admitted request has no retry-after")
	}
}

func deniesAfterLimit(t *testing.T, e *env) {
	c := e.checked(3, time.Second)
	for i := 0; i < 3; i++ {
		c.allow("user")
	}
	for i := 0; i < 10; i++ {
		c.clock.Advance(time.Millisecond)
		d := c.allow("user")
		require.False(t, d.Allowed, "request %d over the limit of 3", 4+i)
		require.Equal(t, 3, d.Count, "a denied request must not be recorded")
		require.Positive(t, d.RetryAfter)
	}
}

func peekDoesNotConsume(t *testing.T, e *env) {
	c := e.checked(2, time.Second)
	for i := 0; i < 5; i++ {
		d := c.peek("user")
		require.Equal(t, 0, d.Count)
		require.True(t, d.Allowed)
	}
	c.allow("user")
	c.allow("user")
	d := c.peek("user")
	require.False(t, d.Allowed, "a peek at the limit says a request would be denied")
	require.Equal(t, 2, d.Count)
}

func freesQuotaAsWindowPasses(t *testing.T, e *env) {
	c := e.checked(2, time.Second)
	c.allow("user")
	c.clock.Advance(400 * time.Millisecond)
	c.allow("user")
	c.clock.Advance(599 * time.Millisecond)
	d := c.allow("user")
	require.False(t, d.Allowed, "1ms before the first request leaves")
	require.Equal(t, time.Millisecond, d.RetryAfter)
	c.clock.Advance(time.Millisecond)
	d = c.allow("user")
	require.True(t, d.Allowed, "the first request has left the window (or the fixed window ended)")
	c.clock.Advance(3 * time.Second)
	d = c.peek("user")
	require.Equal(t, 0, d.Count, "everything has left after a long pause")
	require.Equal(t, 2, d.Remaining)
}

func boundaryBurst(t *testing.T, e *env) {
	c := e.checked(5, time.Second)
	c.clock.Advance(900 * time.Millisecond) // 100ms before a fixed boundary
	for i := 0; i < 5; i++ {
		require.True(t, c.allow("user").Allowed)
	}
	c.clock.Advance(200 * time.Millisecond) // 100ms after it
	admitted := 0
	for i := 0; i < 5; i++ {
		if c.allow("user").Allowed {
			admitted++
		}
	}
	if e.alg == ratelimit.FixedWindow {
		require.Equal(t, 5, admitted, "a fixed window starts afresh at the boundary: 10 requests in 200ms")
	} else {
		require.Equal(t, 0, admitted, "a sliding window still holds the 5 requests of 200ms ago")
	}
}

func remainingNeverNegative(t *testing.T, e *env) {
	c := e.checked(4, time.Second)
	for i := 0; i < 8; i++ {
		d := c.allow("user")
		require.Equal(t, max(0, 4-(i+1)), d.Remaining, "after request %d", i+1)
	}
	c.setPolicy(e.policy(2, time.Second))
	d := c.peek("user")
	require.Equal(t, 4, d.Count, "the history is kept across a policy change")
	require.Equal(t, 0, d.Remaining, "4 requests under a limit of 2: remaining is 0, not -2")
}

func resetRestoresQuota(t *testing.T, e *env) {
	c := e.checked(3, time.Minute)
	for i := 0; i < 4; i++ {
		c.allow("user")
	}
	c.reset("user")
	d := c.peek("user")
	require.Equal(t, 3, d.Remaining)
	for i := 0; i < 3; i++ {
		require.True(t, c.allow("user").Allowed, "request %d after reset", i+1)
	}
	require.False(t, c.allow("user").Allowed)
	c.reset("never-seen") // resetting an unknown key is fine
}

func reconfigureAppliesToExistingKeys(t *testing.T, e *env) {
	c := e.checked(5, time.Second)
	for i := 0; i < 3; i++ {
		c.allow("user")
	}
	c.setPolicy(e.policy(2, time.Second))
	d := c.allow("user")
	require.False(t, d.Allowed, "3 requests already made under a new limit of 2")
	require.Equal(t, 2, d.Limit)
	c.setPolicy(e.policy(10, time.Second))
	d = c.allow("user")
	require.True(t, d.Allowed)
	require.Equal(t, 4, d.Count, "the new limit counts the requests made under the old one")
	require.Equal(t, 6, d.Remaining)
	require.Error(t, c.l.SetPolicy(e.policy(0, time.Second)))
	require.Equal(t, 10, c.l.Policy().Limit, "an invalid policy changes nothing")
}

func keysAreIsolated(t *testing.T, e *env) {
	c := e.checked(2, time.Minute)
	// Keys that a careless naming scheme would map to one server key.
	keys := []string{"user", "user2", "{user}", "%7Buser%7D", "a}b", "a%7Db", "with space", "nul\x00byte", "\xff\xfe"}
	for _, k := range keys {
		c.allow(k)
		c.allow(k)
		require.False(t, c.allow(k).Allowed, "key %q at its limit", k)
	}
	for _, k := range keys {
		require.Equal(t, 2, c.peek(k).Count, "key %q holds only its own requests", k)
	}

	// The same key under another prefix, or the other algorithm, is another user.
	other := e.limiter(2, time.Minute, ratelimit.WithPrefix(e.namespace()+"other:"))
	d, err := other.Allow(context.Background(), "user")
	require.NoError(t, err)
	require.Equal(t, 1, d.Count, "another prefix")
	otherAlg := ratelimit.SlidingWindow
	if e.alg == ratelimit.SlidingWindow {
		otherAlg = ratelimit.FixedWindow
	}
	l, err := ratelimit.New(e.newStore(t), ratelimit.Policy{Limit: 2, Window: time.Minute, Algorithm: otherAlg},
		ratelimit.WithPrefix(e.namespace()), ratelimit.WithClock(e.clock.Now))
	require.NoError(t, err)
	d, err = l.Allow(context.Background(), "user")
	require.NoError(t, err)
	require.True(t, d.Allowed, "the other algorithm keeps its own state for the same key")
	require.Equal(t, 1, d.Count)
}

func allowNConsumesCost(t *testing.T, e *env) {
	c := e.checked(10, time.Second)
	require.Equal(t, 4, c.allowN("user", 4).Count)
	c.clock.Advance(100 * time.Millisecond)
	d := c.allowN("user", 7)
	require.False(t, d.Allowed, "4+7 > 10")
	require.Equal(t, 4, d.Count, "a denied AllowN records nothing")
	d = c.allowN("user", 6)
	require.True(t, d.Allowed)
	require.Equal(t, 10, d.Count)
	require.Equal(t, 0, d.Remaining)
	d = c.allowN("user", 10)
	require.False(t, d.Allowed)
}

func retryAfterIsExact(t *testing.T, e *env) {
	c := e.checked(3, time.Second)
	c.allow("user") // t=0
	c.clock.Advance(300 * time.Millisecond)
	c.allow("user") // t=300ms
	c.clock.Advance(300 * time.Millisecond)
	c.allow("user") // t=600ms
	c.clock.Advance(100 * time.Millisecond)
	d := c.allow("user") // t=700ms
	require.False(t, d.Allowed)
	d2 := c.allowN("user", 2)
	if e.alg == ratelimit.SlidingWindow {
		require.Equal(t, 300*time.Millisecond, d.RetryAfter, "the oldest (t=0) leaves at 1s")
		require.Equal(t, 600*time.Millisecond, d2.RetryAfter, "a cost of 2 waits for the second oldest (t=300ms), leaving at 1.3s")
	} else {
		require.Equal(t, 300*time.Millisecond, d.RetryAfter, "the fixed window ends at 1s")
		require.Equal(t, 300*time.Millisecond, d2.RetryAfter)
	}
	require.Equal(t, c.clock.Now().Add(d.RetryAfter), d.ResetAt, "the oldest request leaves / the window ends")
	c.clock.Advance(d.RetryAfter - time.Microsecond)
	require.False(t, c.allow("user").Allowed, "1µs before retry-after")
	c.clock.Advance(time.Microsecond)
	require.True(t, c.allow("user").Allowed, "at retry-after")
}

func sameMicrosecond(t *testing.T, e *env) {
	const limit = 200
	c := e.checked(limit, time.Second)
	for i := 0; i < limit; i++ {
		require.True(t, c.allow("user").Allowed, "request %d at one instant", i+1)
	}
	d := c.allow("user")
	require.False(t, d.Allowed, "every request at one instant was counted")
	require.Equal(t, limit, d.Count)
	c.clock.Advance(time.Second)
	require.Equal(t, limit, c.allowN("user", limit).Count, "all left together")
}

func rejectsInvalidInput(t *testing.T, e *env) {
	c := e.checked(3, time.Second)
	ctx := context.Background()
	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"empty key", func() error { _, err := c.l.Allow(ctx, ""); return err }, ratelimit.ErrInvalidKey},
		{"key over MaxKeyLen", func() error {
			_, err := c.l.Allow(ctx, string(make([]byte, ratelimit.MaxKeyLen+1)))
			return err
		}, ratelimit.ErrInvalidKey},
		{"peek of an empty key", func() error { _, err := c.l.Peek(ctx, ""); return err }, ratelimit.ErrInvalidKey},
		{"reset of an empty key", func() error { return c.l.Reset(ctx, "") }, ratelimit.ErrInvalidKey},
		{"n = 0", func() error { _, err := c.l.AllowN(ctx, "user", 0); return err }, ratelimit.ErrInvalidCost},
		{"n < 0", func() error { _, err := c.l.AllowN(ctx, "user", -1); return err }, ratelimit.ErrInvalidCost},
		{"n > limit", func() error { _, err := c.l.AllowN(ctx, "user", 4); return err }, ratelimit.ErrInvalidCost},
		{"nil context", func() error {
			var nilCtx context.Context
			_, err := c.l.Allow(nilCtx, "user")
			return err
		}, ratelimit.ErrInvalidArgument},
		{"limit 0", func() error { return c.l.SetPolicy(e.policy(0, time.Second)) }, ratelimit.ErrInvalidPolicy},
		{"negative limit", func() error { return c.l.SetPolicy(e.policy(-1, time.Second)) }, ratelimit.ErrInvalidPolicy},
		{"window 0", func() error { return c.l.SetPolicy(e.policy(3, 0)) }, ratelimit.ErrInvalidPolicy},
		{"negative window", func() error { return c.l.SetPolicy(e.policy(3, -time.Second)) }, ratelimit.ErrInvalidPolicy},
		{"sub-millisecond window", func() error { return c.l.SetPolicy(e.policy(3, time.Millisecond-1)) }, ratelimit.ErrInvalidPolicy},
		{"unknown algorithm", func() error {
			return c.l.SetPolicy(ratelimit.Policy{Limit: 3, Window: time.Second, Algorithm: 9})
		}, ratelimit.ErrInvalidPolicy},
	}
	for _, tc := range cases {
		err := tc.call()
		require.ErrorIs(t, err, tc.want, tc.name)
	}
	require.Equal(t, e.policy(3, time.Second), c.l.Policy(), "invalid policies changed nothing")
	d := c.peek("user")
	require.Equal(t, 0, d.Count, "invalid calls recorded nothing")
	_, err := ratelimit.New(nil, e.policy(1, time.Second))
	require.ErrorIs(t, err, ratelimit.ErrInvalidArgument, "nil store")
}

func cancelledContext(t *testing.T, e *env) {
	l := e.limiter(3, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() {
		_, err := l.Allow(ctx, "user")
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, ratelimit.ErrStore)
		require.ErrorIs(t, err, context.Canceled, "the context's error is wrapped")
	case <-time.After(5 * time.Second):
		t.Fatal("Allow with a cancelled context did not return within 5s")
	}
	d, err := l.Peek(context.Background(), "user")
	require.NoError(t, err)
	require.Equal(t, 0, d.Count, "a cancelled call records nothing")

	ctx, cancel = context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	_, err = l.Allow(ctx, "user")
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// matchesModel drives one key set with a random mix of calls and clock steps
// (some backwards, as skewed clients produce) and policy changes.
func matchesModel(t *testing.T, e *env) {
	rng := mrand.New(mrand.NewSource(int64(e.alg) + 7))
	c := e.checked(5, 200*time.Millisecond)
	keys := []string{"a", "b", "c"}
	for i := 0; i < 400; i++ {
		c.clock.Advance(time.Duration(rng.Intn(60)-10) * time.Millisecond)
		key := keys[rng.Intn(len(keys))]
		switch r := rng.Intn(100); {
		case r < 50:
			c.allow(key)
		case r < 75:
			c.allowN(key, 1+rng.Intn(c.l.Policy().Limit))
		case r < 90:
			c.peek(key)
		case r < 95:
			c.reset(key)
		default:
			c.setPolicy(e.policy(1+rng.Intn(8), time.Duration(1+rng.Intn(400))*time.Millisecond))
		}
	}
}

// noOverAdmission hammers one key from 16 goroutines over 4 store instances,
// first at one manual instant, then on the store's own clock with a window
// far longer than the run (and, for a fixed window, clear of its end):
// exactly the limit is admitted, never more.
func noOverAdmission(t *testing.T, e *env) {
	const limit, goroutines, perGoroutine, instances = 50, 16, 20, 4
	for _, mode := range []string{"manual clock", "store clock"} {
		var limiters []*ratelimit.Limiter
		for i := 0; i < instances; i++ {
			if mode == "manual clock" {
				limiters = append(limiters, e.limiter(limit, time.Hour))
			} else {
				limiters = append(limiters, e.realTimeLimiter(limit, time.Hour))
			}
		}
		if mode == "store clock" {
			e.clearOfBoundary(limiters[0], 10*time.Second)
		}
		key := "hammered-" + mode
		var admitted, failed atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func(l *ratelimit.Limiter) {
				defer wg.Done()
				for i := 0; i < perGoroutine; i++ {
					d, err := l.Allow(context.Background(), key)
					if err != nil {
						failed.Add(1)
						continue
					}
					if d.Allowed {
						admitted.Add(1)
					}
					if d.Count > limit {
						failed.Add(1)
					}
				}
			}(limiters[g%instances])
		}
		wg.Wait()
		require.Zero(t, failed.Load(), "%s: calls that failed or reported a count over %d", mode, limit)
		require.Equal(t, int64(limit), admitted.Load(), "%s: %d calls on one key with limit %d", mode, goroutines*perGoroutine, limit)
	}
}

// noOverAdmissionInAnyWindow hammers one key from 64 goroutines over 4
// store instances for 8 windows of 50ms, on the store's clock, and checks
// every window (any interval for a sliding window, every aligned one for a
// fixed window) with the times the store decided at.
func noOverAdmissionInAnyWindow(t *testing.T, e *env) {
	const limit, window, run, goroutines, instances = 20, 50 * time.Millisecond, 400 * time.Millisecond, 64, 4
	var limiters []*ratelimit.Limiter
	for i := 0; i < instances; i++ {
		limiters = append(limiters, e.realTimeLimiter(limit, window))
	}
	var mu sync.Mutex
	var admitted []int64
	var decisions, failed atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(run)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(l *ratelimit.Limiter) {
			defer wg.Done()
			for time.Now().Before(deadline) {
				d, err := l.Allow(context.Background(), "hammered")
				decisions.Add(1)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				if d.Allowed {
					mu.Lock()
					admitted = append(admitted, d.At.UnixMicro())
					mu.Unlock()
				}
			}
		}(limiters[g%instances])
	}
	wg.Wait()
	require.Zero(t, failed.Load(), "calls that failed; the first: %v", firstErr.Load())
	require.GreaterOrEqual(t, len(admitted), limit, "the load got through (%d decisions)", decisions.Load())
	windows := int(run/window) + 2
	if e.alg == ratelimit.FixedWindow {
		windows *= 2 // a fixed window admits up to 2*limit around a boundary
	}
	require.LessOrEqual(t, len(admitted), limit*windows, "admitted in %v with %d per %v", run, limit, window)
	over := algorithm.OverAdmissions(admitted, limit, window.Microseconds(), e.alg)
	require.Zero(t, over, "windows that admitted more than %d (of %d admitted, %d decisions)", limit, len(admitted), decisions.Load())
}

// storeClock checks the store's own clock in real time: windows of 100ms
// with margins of 50ms.
func storeClock(t *testing.T, e *env) {
	const window, margin = 100 * time.Millisecond, 50 * time.Millisecond
	l := e.realTimeLimiter(2, window)
	ctx := context.Background()
	e.clearOfBoundary(l, window-margin)
	began := time.Now()
	for i := 0; i < 2; i++ {
		d, err := l.Allow(ctx, "user")
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	d, err := l.Allow(ctx, "user")
	require.NoError(t, err)
	require.Less(t, time.Since(began), window-margin, "precondition: 3 calls must fit well within a %v window", window)
	require.False(t, d.Allowed)
	require.Positive(t, d.RetryAfter)
	require.LessOrEqual(t, d.RetryAfter, window)
	require.WithinDuration(t, time.Now(), d.At, margin, "the store's clock is close to ours")
	require.Equal(t, d.At.Add(d.RetryAfter), d.ResetAt, "a denial's ResetAt is At + RetryAfter (the oldest leaves / the window ends)")
	time.Sleep(d.RetryAfter + margin)
	d, err = l.Allow(ctx, "user")
	require.NoError(t, err)
	require.True(t, d.Allowed, "retry-after (%v) has passed", d.RetryAfter)
}
