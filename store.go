package ratelimit

import (
	"context"
	"fmt"
	"time"
)

// MaxKeyLen is the longest key, in bytes, that a Limiter accepts. Keys are
// otherwise arbitrary bytes: braces, spaces, NUL and invalid UTF-8 are fine.
const MaxKeyLen = 4096

// MaxPrefixLen is the longest prefix, in bytes, that WithPrefix accepts: the
// prefix is part of every stored key and sent with every call.
const MaxPrefixLen = 256

// DefaultPrefix namespaces the keys a Limiter writes; see [WithPrefix].
const DefaultPrefix = "ratelimit:"

// Key names the state of one caller's key (ID) in one Limiter's namespace
// (Prefix). Keys with different prefixes never share state. A store derives
// its own names from a Key (a server's key layout is the backend's business)
// and must keep every distinct Key apart, whatever bytes it holds.
type Key struct {
	// Prefix is the Limiter's namespace (WithPrefix): at most MaxPrefixLen
	// bytes, possibly empty.
	Prefix string
	// ID is the caller's key: 1 to MaxKeyLen bytes.
	ID string
}

// Clock says whose clock decides a request.
type Clock uint8

const (
	// StoreClock (the zero value): the store decides at its own time (a
	// server's TIME), and Request.Now is ignored.
	StoreClock Clock = iota
	// CallerClock: the store decides at Request.Now (WithCallerClock).
	CallerClock
)

// Request is one decision a Store must make atomically.
type Request struct {
	// Key names the state the request is decided on.
	Key Key
	// Policy is the policy in force now; it may differ from the one the
	// stored state was written under (see Limiter.SetPolicy).
	Policy Policy
	// Cost is the number of requests to decide, in [1, Policy.MaxCost()].
	Cost int
	// Clock says whether the store uses its own clock or Now.
	Clock Clock
	// Now is the time of the request under CallerClock.
	Now time.Time
	// Retain is how long the store must keep the key's state after a
	// write, at the least (Retention); a TTL or sweeper must not drop it
	// sooner. It is the Limiter's retention (WithRetention): a later
	// policy with a window up to it must still find the history.
	Retain time.Duration
}

// Validate reports a request no store can decide exactly and in bounded
// time, which every store refuses before deciding (or any I/O): a cost
// outside [1, Policy.MaxCost()] (ErrInvalidCost), a caller's time outside
// [MinTime, MaxTime] (ErrInvalidArgument). A Limiter never sends one; a
// store checks all the same, as any caller may use it directly.
func (r *Request) Validate() error {
	if r.Cost < 1 || r.Cost > r.Policy.MaxCost() {
		return fmt.Errorf("%w: cost %d, want 1 to %d", ErrInvalidCost, r.Cost, r.Policy.MaxCost())
	}
	if r.Clock == CallerClock {
		return ValidateTime(r.Now)
	}
	return nil
}

// Retention is how long after a write the key's state must be kept: Retain,
// and at least the policy's window.
func (r *Request) Retention() time.Duration { return max(r.Retain, r.Policy.Window) }

// Store keeps the state of every key and makes each decision atomically.
//
// A Store decides, in ONE atomic step, everything about a request: prune
// what has left the window, count, admit or deny, record. Never split this
// into reads and writes composed by the caller: that races between app
// instances. The package conformance is the executable specification of a
// Store; run it from your store's tests.
//
// Every method returns a Decision or an error, never both: a store that
// cannot decide returns an error and leaves the choice of what to do to the
// Limiter's failure mode. A store must not panic; wrap a client's failures
// in an error. It refuses what Request.Validate reports before deciding, and
// an algorithm it does not support with an error wrapping
// errors.ErrUnsupported.
//
// What a store keeps: a key's state under each algorithm (package
// algorithm's types save themselves as bytes), for at least
// Request.Retention after each write, and as long as the state still
// counts (the algorithm's Life), whichever is longer: state dropped sooner
// lets a key through again. A Decision's times are as time.UnixMicro makes
// them (the local zone, no monotonic reading): the conformance suite
// compares decisions field by field.
type Store interface {
	// Take decides req and records it if admitted. A denial records no
	// request, but writes in one case: state from the future (written at a
	// time later than req's, by a clock that stepped back) is re-timed to
	// req's time, as the rules in package algorithm say.
	Take(ctx context.Context, req Request) (Decision, error)
	// Peek decides req as Take would at this moment, and records nothing,
	// not even the pruning of what has left the window.
	Peek(ctx context.Context, req Request) (Decision, error)
	// Reset forgets everything stored under key, for every algorithm: the
	// key's full quota is available at once. Resetting an unknown key is
	// not an error.
	Reset(ctx context.Context, key Key) error
}

// MultiStore is an optional ability of a Store, discovered by a type
// assertion as database/sql discovers a driver's: deciding several requests
// as one atomic step. Multi uses it when every Limiter shares the store.
type MultiStore interface {
	Store
	// TakeAll decides reqs together: if Take would admit every one of
	// them, each is recorded and its Take decision returned; otherwise
	// nothing is recorded and each decision is what Peek would say (so the
	// denials carry their exact RetryAfter). Requests are decided on
	// distinct state: two requests naming the same Key under the same
	// algorithm are not supported. When the store cannot decide reqs
	// atomically (on a server, keys that live on different shards), it
	// records nothing and returns an error wrapping errors.ErrUnsupported,
	// and the caller decides them one by one.
	TakeAll(ctx context.Context, reqs []Request) ([]Decision, error)
}

// RefundStore is an optional ability of a Store: giving quota back.
type RefundStore interface {
	Store
	// Refund gives back req.Cost of the quota that req.Key has in use under
	// req.Policy, as if that much of what it took had not been taken (see
	// Limiter.Refund for what that means under each algorithm), and returns
	// what Peek of cost 1 would say afterwards. A refund of more than the
	// key has in use changes nothing and returns an error wrapping
	// ErrInvalidCost.
	Refund(ctx context.Context, req Request) (Decision, error)
}

// InProcessStore is an optional ability of a Store: one that decides in
// process, never waiting on I/O (the memory store), says so, and a Limiter
// then spares its calls the time budget (a timer per call, for nothing).
type InProcessStore interface {
	Store
	// InProcess reports whether every call returns without waiting on I/O.
	InProcess() bool
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

// validatePrefix reports, wrapping ErrInvalidKey, why prefix cannot be used.
func validatePrefix(prefix string) error {
	if len(prefix) > MaxPrefixLen {
		return fmt.Errorf("%w: prefix of %d bytes, more than %d", ErrInvalidKey, len(prefix), MaxPrefixLen)
	}
	return nil
}

// The times a store decides at exactly: every algorithm computes in integer
// microseconds since the Unix epoch, and a server's script in doubles, exact
// below 2^53; a time stays within them with room for the windows it adds.
// A caller's clock (CallerClock) outside them is refused with
// ErrInvalidArgument before any I/O: a time before the epoch once made a
// script that never ended, holding a shared server.
var (
	// MinTime is the earliest time a request may be decided at: the Unix
	// epoch.
	MinTime = time.UnixMicro(0)
	// MaxTime is the latest: 2^53 µs after the epoch less four of the
	// longest windows (in the year 2254).
	MaxTime = time.UnixMicro(maxMicros)
)

const maxMicros = 1<<53 - 4*int64(MaxWindow/time.Microsecond)

// ValidateTime reports, wrapping ErrInvalidArgument, a time outside
// [MinTime, MaxTime], at which no store can decide exactly.
func ValidateTime(t time.Time) error {
	if t.Before(MinTime) || t.After(MaxTime) {
		return fmt.Errorf("%w: time %v is outside [%v, %v], where every store decides exactly", ErrInvalidArgument,
			t.UTC().Format(time.RFC3339Nano), MinTime.UTC().Format(time.RFC3339), MaxTime.UTC().Format(time.RFC3339))
	}
	return nil
}
