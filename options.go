package ratelimit

import (
	"context"
	"time"
)

// PolicyFunc picks the policy of a key (its customer's tier, say), for a
// Limiter built WithPolicyFunc. Returning the zero Policy applies the
// Limiter's own (New, SetPolicy). An error, or an invalid policy, fails the
// call with an error wrapping ErrInvalidPolicy, recording nothing.
type PolicyFunc func(ctx context.Context, key string) (Policy, error)

// DefaultTimeout is the time budget of a store call unless WithTimeout says
// otherwise: far above what a healthy Redis or Valkey needs under load (the
// slowest calls of `go run ./bench -backend all`, in docs/figures.md), and
// short enough that a stalled server does not stall the service that asks
// it.
const DefaultTimeout = 100 * time.Millisecond

// Option configures a Limiter.
type Option func(*Limiter)

// WithPrefix sets the namespace of every key the Limiter writes (default
// DefaultPrefix), at most MaxPrefixLen bytes, any bytes. Limiters with
// different prefixes never share state.
func WithPrefix(prefix string) Option { return func(l *Limiter) { l.prefix = prefix } }

// WithCallerClock makes the Limiter decide every request at now() (sent to
// the store as backend.Request.Now, to the microsecond) instead of letting the store
// use its own clock. On Redis and Valkey the default (the server's clock)
// keeps instances with skewed clocks on one window; use a caller's clock for
// tests, or when a network store must not call TIME. Callers' clocks skewed
// by up to backend.MaxSkew share one timeline per key (a Decision's At may
// then be ahead of now()); keep them closer than that. A time before the
// epoch's first microsecond or after 2254 (backend.MaxMicros) is refused
// with ErrInvalidArgument: no store decides it exactly.
func WithCallerClock(now func() time.Time) Option { return func(l *Limiter) { l.clock = now } }

// WithName names the Limiter's policy ("per-user", "per-ip"...) in Events
// and in Multi's decisions.
func WithName(name string) Option { return func(l *Limiter) { l.name = name } }

// WithObserver calls o after every decision (see Observer). With no
// observer, nothing is measured.
func WithObserver(o Observer) Option { return func(l *Limiter) { l.observer = o } }

// WithTimeout bounds every call to the store to d (default DefaultTimeout):
// a call whose context has no earlier deadline gets one, so that a stalled
// server costs each caller at most d, and the store's error (wrapping
// context.DeadlineExceeded) goes to the failure mode. The budget is a
// standard context over the caller's: an earlier deadline of the caller's is
// kept, and its values, and a cancellation of the caller's ends a call in
// flight at once. A budget that runs out has cause backend.ErrBudget
// (context.Cause), which tells it from the caller's own deadline. A
// store that decides in process (its backend.Info says so, as the
// memory store) gets no time budget: it has no I/O to wait on.
// d must be positive.
func WithTimeout(d time.Duration) Option { return func(l *Limiter) { l.timeout = d } }

// WithFailOpen admits requests when the store fails (server down, timeout,
// cancelled context): the caller gets an allowed Decision with Source
// SourceFailOpen and a nil error, and the store's error goes to the observer.
// Nothing is recorded. By default a Limiter fails closed: the caller gets
// the error, wrapping ErrStore. Bad input is never admitted.
func WithFailOpen() Option { return func(l *Limiter) { l.failOpen = true } }

// WithDryRun makes the Limiter admit every request while deciding and
// recording as usual: the observer sees the real decision (Event.Decision),
// the caller an allowed one. For rolling out a new limit.
func WithDryRun() Option { return func(l *Limiter) { l.dryRun = true } }

// WithRetention keeps every key's state for at least d after its last write
// (default: the window of the policy New is given; a policy's own window if
// longer), so that a later policy with a window up to d (SetPolicy, or a
// key's policy from WithPolicyFunc) finds the whole history: a server's TTLs
// and the memory store's sweeper go by it. A policy with a longer window is
// accepted and sees what was kept (see SetPolicy). Keeping state longer
// costs memory for keys that went idle. d must not be negative (0 is the
// default) nor over MaxWindow.
func WithRetention(d time.Duration) Option { return func(l *Limiter) { l.retention = d } }

// WithPolicyFunc makes the Limiter pick each key's policy with f, on every
// call: higher limits for paying customers, a tier that changes at run time,
// without a Limiter per tier. A key's new policy applies at once with its
// history, as SetPolicy does; policies of different algorithms keep their
// state apart. Set WithRetention to the longest window f may return.
func WithPolicyFunc(f PolicyFunc) Option { return func(l *Limiter) { l.policyFunc = f } }
