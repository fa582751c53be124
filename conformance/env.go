package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
)

// env is what a scenario works with.
type env struct {
	t        *testing.T
	newStore NewStore
	alg      ratelimit.Algorithm
	// algorithms are those the store supports (Supports).
	algorithms []ratelimit.Algorithm
	prefix     string
	clock      *ManualClock
	// direct: the checker sends requests to the store itself (RunStore),
	// not through a Limiter (RunLimiter).
	direct bool
	expire ExpireFunc
}

// start is where manual clocks start: a round time, so fixed windows of whole
// seconds start there, and recent, so a server does not expire the keys.
func start() time.Time {
	return time.Now().Truncate(time.Hour).Add(time.Hour)
}

// policy is limit per window under the scenario's algorithm; for GCRA, a
// rate of limit per window with a burst of limit, so that a key that has
// been idle may make limit requests at once, as under the window algorithms.
func (e *env) policy(limit int, window time.Duration) ratelimit.Policy {
	return policyOf(e.alg, limit, window)
}

func policyOf(alg ratelimit.Algorithm, limit int, window time.Duration) ratelimit.Policy {
	return ratelimit.NewPolicy(alg, limit, window)
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
	return e.limiterOn(e.newStore(e.t), limit, window, opts...)
}

// limiterOn is a Limiter as limiter's, on s.
func (e *env) limiterOn(s backend.Store, limit int, window time.Duration, opts ...ratelimit.Option) *ratelimit.Limiter {
	if e.clock == nil {
		e.clock = NewManualClock(start())
	}
	opts = append([]ratelimit.Option{ratelimit.WithPrefix(e.namespace()), ratelimit.WithCallerClock(e.clock.Now),
		ratelimit.WithTimeout(budget), ratelimit.WithRetention(retention)}, opts...)
	l, err := ratelimit.New(s, e.policy(limit, window), opts...)
	mustNoError(e.t, err)
	return l
}

// realTimeLimiter is a limiter that lets the store use its own clock.
func (e *env) realTimeLimiter(limit int, window time.Duration) *ratelimit.Limiter {
	l, err := ratelimit.New(e.newStore(e.t), e.policy(limit, window), ratelimit.WithPrefix(e.namespace()), ratelimit.WithTimeout(budget))
	mustNoError(e.t, err)
	return l
}

// retention is the suite's Limiters': the longest window a scenario sets.
const retention = time.Hour

// budget is the time budget of the suite's Limiters: the suite checks what
// a store decides, not how fast, so a loaded machine (the race detector,
// every package's tests at once) must not turn slow calls into failures.
const budget = 10 * time.Second

// clearOfBoundary makes a fixed window (or a counter's) on the store's
// clock last at least need more, sleeping into the next window if it would
// end sooner, so that a short burst of calls is decided in one window. The
// other algorithms have no boundary: it returns at once.
func (e *env) clearOfBoundary(l *ratelimit.Limiter, need time.Duration) {
	if e.alg != ratelimit.FixedWindow && e.alg != ratelimit.SlidingWindowCounter {
		return
	}
	if e.alg == ratelimit.SlidingWindowCounter { // ResetAt is no window's end: ask a fixed window
		fixed, err := ratelimit.New(e.newStore(e.t), policyOf(ratelimit.FixedWindow, 1, l.Policy().Window), ratelimit.WithPrefix(e.namespace()), ratelimit.WithTimeout(budget))
		mustNoError(e.t, err)
		l = fixed
	}
	d, err := l.Peek(context.Background(), "boundary-probe") // an empty key: ResetAt is the window's end
	mustNoError(e.t, err)
	if left := d.ResetAt.Sub(d.At); left < need {
		time.Sleep(left + time.Millisecond)
	}
}

// checker replays every call on the reference model and compares. It
// decides on the store directly (RunStore) or through its Limiter
// (RunLimiter); the Limiter is there in both, for what only it checks.
type checker struct {
	t      *testing.T
	l      *ratelimit.Limiter
	store  backend.Store // nil: through l
	rule   *backend.Rule // l's policy, compiled, for the store and the model
	policy ratelimit.Policy
	prefix string
	model  *Model
	clock  *ManualClock
	ctx    context.Context
}

func (e *env) checked(limit int, window time.Duration, opts ...ratelimit.Option) *checker {
	s := e.newStore(e.t)
	return e.checkerOn(s, e.limiterOn(s, limit, window, opts...))
}

// checkerOn is a checker of l, a Limiter of the scenario's on s.
func (e *env) checkerOn(s backend.Store, l *ratelimit.Limiter) *checker {
	c := &checker{t: e.t, l: l, prefix: e.namespace(), model: NewModel(), clock: e.clock, ctx: context.Background()}
	if e.direct {
		c.store = s
	}
	c.setRule(l.Policy())
	return c
}

func (c *checker) setRule(p ratelimit.Policy) {
	c.t.Helper()
	rule, err := compile(p, c.prefix)
	mustNoError(c.t, err, "compiling %v", p)
	c.policy, c.rule = p, rule
}

// compile is p's rule for the keys under prefix, kept for the suite's
// retention (or p's window, if longer).
func compile(p ratelimit.Policy, prefix string) (*backend.Rule, error) {
	r, err := backend.NewRule(p.Algorithm, int64(p.Limit), p.Window, int64(p.Burst), max(retention, p.Window), prefix)
	if err == nil && p.Block != 0 {
		r, err = r.WithBlock(p.Block)
	}
	return r, err
}

// request is a request of cost n for key at the checker's time.
func (c *checker) request(key string, n int) backend.Request {
	return backend.Request{Rule: c.rule, Key: key, Cost: int64(n), Now: c.clock.Now().UnixMicro()}
}

// decide is what the store (directly, or through the Limiter) answered to
// req, required to be the model's want.
func (c *checker) decide(what string, req backend.Request, want backend.Outcome, direct func() (backend.Outcome, error), limited func() (ratelimit.Decision, error)) ratelimit.Decision {
	c.t.Helper()
	var got ratelimit.Decision
	var err error
	if c.store != nil {
		var out backend.Outcome
		out, err = direct()
		got = decisionOf(out, req.Rule)
	} else {
		got, err = limited()
	}
	mustNoError(c.t, err, what)
	mustDecide(c.t, decisionOf(want, req.Rule), got, "%s at %v under %v", what, c.clock.Now().Format(time.StampMicro), c.policy)
	return got
}

// allowN calls AllowN (or the store's Take) and requires the model's
// decision.
func (c *checker) allowN(key string, n int) ratelimit.Decision {
	c.t.Helper()
	req := c.request(key, n)
	return c.decide(fmt.Sprintf("AllowN(%q, %d)", key, n), req, c.model.Take(req),
		func() (backend.Outcome, error) { return c.store.Take(c.ctx, req) },
		func() (ratelimit.Decision, error) { return c.l.AllowN(c.ctx, key, n) })
}

func (c *checker) allow(key string) ratelimit.Decision { c.t.Helper(); return c.allowN(key, 1) }

func (c *checker) peek(key string) ratelimit.Decision {
	c.t.Helper()
	req := c.request(key, 1)
	return c.decide(fmt.Sprintf("Peek(%q)", key), req, c.model.Peek(req),
		func() (backend.Outcome, error) { return c.store.Peek(c.ctx, req) },
		func() (ratelimit.Decision, error) { return c.l.Peek(c.ctx, key) })
}

// refund calls Refund and requires the model's decision, or its refusal.
// A store that cannot refund must say so (errors.ErrUnsupported), and the
// model then does nothing either.
func (c *checker) refund(key string, n int) (ratelimit.Decision, bool) {
	c.t.Helper()
	if _, err := c.l.Refund(c.ctx, "refund-probe", 1); errors.Is(err, errors.ErrUnsupported) { // a key never taken from: refused if supported
		return ratelimit.Decision{}, false
	}
	req := c.request(key, n)
	want, ok := c.model.Refund(req)
	if !ok {
		var err error
		if c.store != nil {
			_, err = c.store.Refund(c.ctx, req)
		} else {
			_, err = c.l.Refund(c.ctx, key, n)
		}
		mustErrorIs(c.t, err, ratelimit.ErrInvalidCost, "Refund(%q, %d) of more than is in use", key, n)
		return ratelimit.Decision{}, false
	}
	return c.decide(fmt.Sprintf("Refund(%q, %d)", key, n), req, want,
		func() (backend.Outcome, error) { return c.store.Refund(c.ctx, req) },
		func() (ratelimit.Decision, error) { return c.l.Refund(c.ctx, key, n) }), true
}

func (c *checker) reset(key string) {
	c.t.Helper()
	c.model.Reset(c.rule.Prefix(), key)
	if c.store != nil {
		mustNoError(c.t, c.store.Reset(c.ctx, c.rule.Prefix(), key), "Reset(%q)", key)
		return
	}
	mustNoError(c.t, c.l.Reset(c.ctx, key), "Reset(%q)", key)
}

func (c *checker) setPolicy(p ratelimit.Policy) {
	c.t.Helper()
	mustNoError(c.t, c.l.SetPolicy(p))
	c.setRule(c.l.Policy())
}

// decisionOf is out as the Decision of a request under rule: the kit's own
// conversion, as the model's arithmetic is its own.
func decisionOf(out backend.Outcome, rule *backend.Rule) ratelimit.Decision {
	limit := int64(0)
	if rule != nil { // a request the store must refuse
		limit = rule.MaxCost()
	}
	return ratelimit.Decision{Allowed: out.Allowed(), Limit: int(limit), Remaining: int(max(limit-out.Count, 0)), Count: int(out.Count),
		ResetAt: time.UnixMicro(out.ResetAt), RetryAfter: time.Duration(out.RetryAfter) * time.Microsecond, At: time.UnixMicro(out.At)}
}

// request is a request on the scenario's clock, under the scenario's prefix
// followed by prefix.
func (e *env) request(prefix, id string, p ratelimit.Policy, cost int) backend.Request {
	e.t.Helper()
	if e.clock == nil {
		e.clock = NewManualClock(start())
	}
	rule, err := compile(p, e.namespace()+prefix)
	mustNoError(e.t, err, "compiling %v", p)
	return backend.Request{Rule: rule, Key: id, Cost: int64(cost), Now: e.clock.Now().UnixMicro()}
}

// storeOf is s answering in Decisions, for the scenarios that call a store
// directly; so does modelOf for the model.
func storeOf(s backend.Store) *decider { return &decider{s} }

type decider struct{ backend.Store }

func (d *decider) Take(ctx context.Context, req backend.Request) (ratelimit.Decision, error) {
	out, err := d.Store.Take(ctx, req)
	return decisionOf(out, req.Rule), err
}

func (d *decider) Peek(ctx context.Context, req backend.Request) (ratelimit.Decision, error) {
	out, err := d.Store.Peek(ctx, req)
	return decisionOf(out, req.Rule), err
}

// TakeAll is the store's TakeAll.
func (d *decider) TakeAll(ctx context.Context, reqs []backend.Request) ([]ratelimit.Decision, error) {
	outs := make([]backend.Outcome, len(reqs))
	if err := d.Store.TakeAll(ctx, reqs, outs); err != nil {
		return nil, err
	}
	ds := make([]ratelimit.Decision, len(reqs))
	for i := range outs {
		ds[i] = decisionOf(outs[i], reqs[i].Rule)
	}
	return ds, nil
}

func modelOf(m *Model) *modelDecider { return &modelDecider{m} }

type modelDecider struct{ m *Model }

func (d *modelDecider) Take(req backend.Request) ratelimit.Decision {
	return decisionOf(d.m.Take(req), req.Rule)
}

func (d *modelDecider) Peek(req backend.Request) ratelimit.Decision {
	return decisionOf(d.m.Peek(req), req.Rule)
}

// supported reports whether err, a store's answer to a call of an
// operation, is anything but the one way a store says it has not that
// operation (an error wrapping errors.ErrUnsupported, as
// backend.Unimplemented answers).
func supported(err error) bool { return !errors.Is(err, errors.ErrUnsupported) }

// takesAll reports whether s decides several requests together: a TakeAll
// of one request on a key of its own under the scenario's prefix.
func (e *env) takesAll(s backend.Store) bool {
	req := e.request("takes-all-probe:", "probe", e.policy(1, time.Minute), 1)
	return supported(s.TakeAll(context.Background(), []backend.Request{req}, make([]backend.Outcome, 1)))
}

// refunds reports whether s refunds: a refund on a key never taken from,
// which a store that refunds refuses with ErrInvalidCost.
func (e *env) refunds(s backend.Store) bool {
	_, err := s.Refund(context.Background(), e.request("refunds-probe:", "probe", e.policy(1, time.Minute), 1))
	return supported(err)
}
