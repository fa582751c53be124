// Package ratelimit limits how often a key (a user, an IP address, a token)
// may act, exactly and atomically, on a storage backend of your choice.
//
// # The model
//
// A [Policy] says "at most Limit requests per Window". The default algorithm,
// [SlidingWindow], keeps a log of every admitted request per key, scored by
// its time. To decide a request at time now, the store removes the entries
// older than now-Window, counts the rest, and admits the request only if
// count+cost <= Limit, recording it. Denied requests are never recorded, so a
// client that keeps hammering cannot grow its log beyond Limit entries, and
// there is no burst at window boundaries: any interval of length Window holds
// at most Limit admitted requests. [FixedWindow] instead counts requests in
// windows aligned to multiples of Window; it is cheaper (one counter per key)
// but admits up to 2*Limit around a boundary.
//
// All three steps (prune, count, admit) are one atomic operation of the
// [Store]: a lock in the memory store, one Lua script in one round trip on
// Redis or Valkey. Many app instances sharing one server therefore never
// admit more than Limit between them.
//
// # Time
//
// Stores keep time in microseconds. By default a store uses its own clock
// (the server's clock on Redis and Valkey, so instances with skewed clocks
// agree on one window); [WithClock] makes the [Limiter] send its own time
// instead.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// Sentinel errors. Errors returned by this module wrap one of them with
// detail, so test them with errors.Is.
var (
	// ErrInvalidPolicy: the limit is not positive, the window is shorter
	// than a millisecond, or the algorithm is unknown.
	ErrInvalidPolicy = errors.New("ratelimit: invalid policy")
	// ErrInvalidKey: the key is empty or longer than MaxKeyLen bytes.
	ErrInvalidKey = errors.New("ratelimit: invalid key")
	// ErrInvalidCost: the cost n of AllowN is not in [1, Limit].
	ErrInvalidCost = errors.New("ratelimit: invalid cost")
	// ErrInvalidArgument: a nil store or a nil context.
	ErrInvalidArgument = errors.New("ratelimit: invalid argument")
	// ErrStore: the store failed to decide (server down, timeout, cancelled
	// context...). The store's own error is wrapped too, so
	// errors.Is(err, context.DeadlineExceeded) works as well. No decision
	// was made: the Decision returned with it is the zero value.
	ErrStore = errors.New("ratelimit: store failed")
)

// MaxKeyLen is the longest key, in bytes, that a Limiter accepts. Keys are
// otherwise arbitrary bytes: braces, spaces, NUL and invalid UTF-8 are fine.
const MaxKeyLen = 4096

// DefaultPrefix namespaces the keys a Limiter writes; see [WithPrefix].
const DefaultPrefix = "ratelimit:"

// Algorithm selects how a Policy counts requests. The zero value is
// SlidingWindow.
type Algorithm uint8

const (
	// SlidingWindow keeps every admitted request in a log scored by time
	// and counts those in the last Window: exact, with no boundary burst.
	// It stores up to Limit entries per key.
	SlidingWindow Algorithm = iota
	// FixedWindow counts requests in windows aligned to multiples of
	// Window (since the Unix epoch); the count restarts at each boundary.
	// One counter per key, but a client can get 2*Limit requests through
	// in a short time around a boundary.
	FixedWindow
)

// String returns "sliding" or "fixed".
func (a Algorithm) String() string {
	switch a {
	case SlidingWindow:
		return "sliding"
	case FixedWindow:
		return "fixed"
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// tag is the suffix that keeps the state of the two algorithms apart.
func (a Algorithm) tag() string {
	if a == FixedWindow {
		return "fw"
	}
	return "sw"
}

// Policy is a limit of Limit requests per Window, counted by Algorithm.
type Policy struct {
	// Limit is the number of requests admitted per window; at least 1.
	Limit int
	// Window is the length of the window; at least a millisecond. It is
	// kept to microsecond precision (the finer part is dropped).
	Window time.Duration
	// Algorithm is SlidingWindow (the zero value) or FixedWindow.
	Algorithm Algorithm
}

// PerSecond is a sliding-window policy of n requests per second.
func PerSecond(n int) Policy { return Policy{Limit: n, Window: time.Second} }

// PerMinute is a sliding-window policy of n requests per minute.
func PerMinute(n int) Policy { return Policy{Limit: n, Window: time.Minute} }

// PerHour is a sliding-window policy of n requests per hour.
func PerHour(n int) Policy { return Policy{Limit: n, Window: time.Hour} }

// Validate reports why p cannot be used, wrapping ErrInvalidPolicy, or nil.
func (p Policy) Validate() error {
	switch {
	case p.Limit <= 0:
		return fmt.Errorf("%w: limit %d is not positive", ErrInvalidPolicy, p.Limit)
	case p.Window < time.Millisecond:
		return fmt.Errorf("%w: window %v is shorter than 1ms", ErrInvalidPolicy, p.Window)
	case p.Algorithm != SlidingWindow && p.Algorithm != FixedWindow:
		return fmt.Errorf("%w: unknown algorithm %v", ErrInvalidPolicy, p.Algorithm)
	}
	return nil
}

// String formats p as "100 per 1m0s (sliding)".
func (p Policy) String() string {
	return fmt.Sprintf("%d per %v (%v)", p.Limit, p.Window, p.Algorithm)
}

// Decision is the outcome of one request, with everything a caller needs to
// answer the client (see the RateLimit-* HTTP headers).
type Decision struct {
	// Allowed reports whether the request was admitted (for Peek: whether
	// a request of cost 1 would be admitted now).
	Allowed bool
	// Limit is the policy's limit the decision was made under.
	Limit int
	// Remaining is Limit-Count, never negative: how many more requests of
	// cost 1 the key may make now.
	Remaining int
	// Count is the number of requests in the current window after this
	// decision (including this one when it was admitted).
	Count int
	// ResetAt is when the window next frees quota: for a sliding window,
	// when the oldest request in it leaves (the decision time if the
	// window is empty); for a fixed window, when the window ends.
	ResetAt time.Time
	// RetryAfter is zero when Allowed. Otherwise it is how long until the
	// same request would be admitted: for a sliding window, exactly until
	// enough of the oldest requests have left the window; for a fixed
	// window, until the window ends.
	RetryAfter time.Duration
	// At is the time the decision was made at, on the clock that made it:
	// the store's (a server's TIME), or the request's with WithClock. An
	// admitted request is recorded at At. ResetAt is on the same clock.
	At time.Time
}

// Request is one decision a Store must make atomically.
type Request struct {
	// Prefix and Key name the state: Prefix is the Limiter's namespace,
	// Key the caller's key (valid, at most MaxKeyLen bytes). Network stores
	// derive their key names with StoreKey.
	Prefix, Key string
	// Policy is the policy in force now; it may differ from the one the
	// stored state was written under (see Limiter.SetPolicy).
	Policy Policy
	// Cost is the number of requests to admit, in [1, Policy.Limit]; 0
	// means peek: decide as for a request of cost 1 but record nothing.
	Cost int
	// Now is the time of the request. The zero time means the store's own
	// clock (a server's clock for a network store).
	Now time.Time
}

// StoreKey is the name of the request's state on a key-value server:
// Prefix + "{" + Key + "}:" + "sw" or "fw". The braces make Key the Redis
// Cluster hash tag, so every key of one user lives in one slot; braces and
// '%' inside Key are percent-escaped so the tag is always exactly Key.
func (r Request) StoreKey() string {
	key := r.Key
	if strings.ContainsAny(key, "{}%") {
		key = keyEscaper.Replace(key)
	}
	return r.Prefix + "{" + key + "}:" + r.Policy.Algorithm.tag()
}

var keyEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// Store keeps the state of every key and makes each decision atomically.
//
// A Store decides, in ONE atomic step, everything about a request: prune
// what has left the window, count, admit or deny, record. Never split this
// into reads and writes composed by the caller: that races between app
// instances. The package conformance is the executable specification of a
// Store; run it from your store's tests.
type Store interface {
	// Take decides req (req.Cost >= 1), recording it if admitted, or peeks
	// (req.Cost == 0) without recording anything. Errors are returned,
	// never turned into a decision.
	Take(ctx context.Context, req Request) (Decision, error)
	// Reset forgets the state of req's key under req.Policy.Algorithm.
	Reset(ctx context.Context, req Request) error
}

// Limiter applies a Policy to keys on a Store. It is safe for concurrent use;
// several Limiters (in one process or many) on one shared store enforce one
// limit together.
type Limiter struct {
	store    Store
	policy   atomic.Pointer[Policy]
	prefix   string
	clock    func() time.Time
	name     string
	observer Observer
	failOpen bool
	dryRun   bool
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithPrefix sets the namespace of every key the Limiter writes (default
// DefaultPrefix). Limiters with different prefixes never share state.
func WithPrefix(prefix string) Option { return func(l *Limiter) { l.prefix = prefix } }

// WithClock makes the Limiter send now() as the time of every request
// instead of letting the store use its own clock. On Redis and Valkey the
// default (the server's clock) keeps instances with skewed clocks on one
// window; use a client clock for tests, or when a network store must not
// call TIME.
func WithClock(now func() time.Time) Option { return func(l *Limiter) { l.clock = now } }

// WithName names the Limiter's policy ("per-user", "per-ip"...) in Events
// and in Multi's decisions.
func WithName(name string) Option { return func(l *Limiter) { l.name = name } }

// WithObserver calls o after every decision (Allow, AllowN, Peek), including
// failed ones. With no observer, nothing is measured.
func WithObserver(o Observer) Option { return func(l *Limiter) { l.observer = o } }

// WithFailOpen admits requests when the store fails (server down, timeout):
// AllowN then returns an allowed Decision (Remaining 0, times zero) together
// with the error, wrapped with ErrStore, which the observer also sees. By
// default a Limiter fails closed: the zero Decision, not allowed, and the
// error. Bad input is never admitted.
func WithFailOpen() Option { return func(l *Limiter) { l.failOpen = true } }

// WithDryRun makes the Limiter admit every request while deciding and
// recording as usual: the observer sees the real decision (Event.Decision),
// the caller an allowed one. For rolling out a new limit.
func WithDryRun() Option { return func(l *Limiter) { l.dryRun = true } }

// Observer receives every decision of a Limiter; it must be safe for
// concurrent use and quick (it runs on the request's path).
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// Event is one decision as an Observer sees it: enough to trace a denial
// to its key and policy.
type Event struct {
	// Name is the Limiter's name (WithName), Policy its policy then.
	Name   string
	Policy Policy
	// Key is the caller's key; Cost the requests asked for (0 for Peek).
	Key  string
	Cost int
	// Decision is the store's decision, before fail-open or dry-run change
	// what the caller gets; the zero Decision when Err is set.
	Decision Decision
	// Err is the store's error, wrapped with ErrStore, or nil.
	Err error
	// Latency is the time the store took.
	Latency time.Duration
	// DryRun reports a Limiter in dry-run mode: the caller was admitted
	// whatever Decision says.
	DryRun bool
}

// New returns a Limiter applying p on store.
func New(store Store, p Policy, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidArgument)
	}
	l := &Limiter{store: store, prefix: DefaultPrefix}
	for _, o := range opts {
		o(l)
	}
	if err := l.SetPolicy(p); err != nil {
		return nil, err
	}
	return l, nil
}

// SetPolicy replaces the policy. It applies to every key on its next call,
// with the history recorded so far: lowering a limit denies a key already
// over the new limit at once; nothing is reset. A new window length
// re-reads a sliding log under the new length; a fixed window whose aligned
// start changes starts a fresh count. Changing the algorithm switches to
// state kept apart (the old state expires by itself). An invalid p changes
// nothing.
func (l *Limiter) SetPolicy(p Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	p.Window = p.Window.Truncate(time.Microsecond)
	l.policy.Store(&p)
	return nil
}

// Policy returns the policy in force.
func (l *Limiter) Policy() Policy { return *l.policy.Load() }

// Allow is AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN decides whether key may make n requests now, and records them if
// so. n must be in [1, Limit] (a larger n could never be admitted): anything
// else is ErrInvalidCost with nothing recorded. A denial records nothing.
// A store failure returns ErrStore and the zero Decision.
func (l *Limiter) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	p := l.policy.Load()
	if err := checkArgs(ctx, key); err != nil {
		return Decision{}, err
	}
	if n < 1 || n > p.Limit {
		return Decision{}, fmt.Errorf("%w: n=%d, want 1 to %d", ErrInvalidCost, n, p.Limit)
	}
	if l.observer != nil || l.failOpen || l.dryRun {
		return l.decide(ctx, Request{Prefix: l.prefix, Key: key, Policy: *p, Cost: n, Now: l.now()})
	}
	// The request is built in the call: this is the hot path, and a Request
	// passed through helpers is copied at each step.
	d, err := l.store.Take(ctx, Request{Prefix: l.prefix, Key: key, Policy: *p, Cost: n, Now: l.now()})
	if err != nil {
		return Decision{}, storeError(err)
	}
	return d, nil
}

// decide is AllowN and Peek with an observer, fail-open or dry-run.
func (l *Limiter) decide(ctx context.Context, req Request) (Decision, error) {
	var began time.Time
	if l.observer != nil {
		began = time.Now()
	}
	d, err := l.store.Take(ctx, req)
	if err != nil {
		d, err = Decision{}, storeError(err)
	}
	if l.observer != nil {
		l.observer.Observe(ctx, Event{Name: l.name, Policy: req.Policy, Key: req.Key, Cost: req.Cost,
			Decision: d, Err: err, Latency: time.Since(began), DryRun: l.dryRun})
	}
	switch {
	case err != nil && l.failOpen:
		return Decision{Allowed: true, Limit: req.Policy.Limit}, err
	case err == nil && l.dryRun && !d.Allowed:
		d.Allowed, d.RetryAfter = true, 0
	}
	return d, err
}

// Wait is WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) (Decision, error) {
	return l.WaitN(ctx, key, 1)
}

// WaitN blocks until key may make n requests, records them and returns the
// admitting Decision. After each denial it sleeps for the denial's
// RetryAfter (in real time) and asks again: other callers may take the
// freed quota first, so a wait can take several rounds. It returns at once,
// with the denial and an error wrapping context.DeadlineExceeded, when the
// context's deadline comes before the request could fit; when the context
// is done while waiting, the last denial and ctx.Err(). Errors are as for
// AllowN (a Limiter that fails open admits without waiting).
func (l *Limiter) WaitN(ctx context.Context, key string, n int) (Decision, error) {
	var timer *time.Timer
	for {
		d, err := l.AllowN(ctx, key, n)
		if err != nil || d.Allowed {
			return d, err
		}
		wait := max(d.RetryAfter, time.Microsecond)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return d, fmt.Errorf("ratelimit: %q would wait %v, past the context's deadline: %w", key, wait, context.DeadlineExceeded)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return d, ctx.Err()
		}
	}
}

// Name is the name given with WithName.
func (l *Limiter) Name() string { return l.name }

// Peek reports key's quota without consuming any: Allowed tells whether a
// request of cost 1 would be admitted now, Remaining how many would.
func (l *Limiter) Peek(ctx context.Context, key string) (Decision, error) {
	if err := checkArgs(ctx, key); err != nil {
		return Decision{}, err
	}
	return l.decide(ctx, l.request(key))
}

// Reset forgets key's history under the current algorithm: its full quota
// is available at once.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := checkArgs(ctx, key); err != nil {
		return err
	}
	if err := l.store.Reset(ctx, l.request(key)); err != nil {
		return storeError(err)
	}
	return nil
}

// request is a peek at key under the current policy.
func (l *Limiter) request(key string) Request {
	return Request{Prefix: l.prefix, Key: key, Policy: *l.policy.Load(), Now: l.now()}
}

// now is the Limiter's clock, or the zero time for the store's own.
func (l *Limiter) now() time.Time {
	if l.clock == nil {
		return time.Time{}
	}
	return l.clock()
}

// checkArgs validates the arguments common to every call.
func checkArgs(ctx context.Context, key string) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	return ValidateKey(key)
}

// ValidateKey reports, wrapping ErrInvalidKey, why key cannot be used.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
}

// storeError wraps err with ErrStore unless a store already did.
func storeError(err error) error {
	if errors.Is(err, ErrStore) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrStore, err)
}
