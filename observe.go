package ratelimit

import (
	"context"
	"strconv"
	"time"
)

// Observer receives every decision of a Limiter (Allow, AllowN, Peek, and
// the Limiter's part of a Multi), including those a failure mode made; it
// must be safe for concurrent use and quick (it runs on the request's path).
// Bad input is not a decision and is not observed.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// Op is what an Event decided.
type Op uint8

// The Ops.
const (
	OpTake Op = iota
	OpPeek
	OpCharge
	OpAcquire
	OpRelease
)

// String returns "take", "peek", "charge", "acquire" or "release".
func (o Op) String() string {
	switch o {
	case OpTake:
		return "take"
	case OpPeek:
		return "peek"
	case OpCharge:
		return "charge"
	case OpAcquire:
		return "acquire"
	case OpRelease:
		return "release"
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// Event is one decision as an Observer sees it: enough to trace a denial
// to its key and policy, or a failure to its cause.
type Event struct {
	// Name is the Limiter's name (WithName), Policy its policy then.
	Name   string
	Policy Policy
	// Key is the caller's key; Cost the requests asked for.
	Key  string
	Cost int
	// Op is what was decided: a request taken (AllowN, Wait, Multi), a
	// Peek (which records nothing), a Charge (which records its cost
	// whatever the quota; Decision.Allowed: whether it fit), a permit's
	// Acquire or Release.
	Op Op
	// Decision is the decision made, Decision.Source saying by what: the
	// store, or the failure mode when the store failed. It is the real
	// decision even in dry-run mode, where the caller was admitted anyway.
	// It is the zero Decision when the caller got an error.
	Decision Decision
	// Err is the store's error, wrapped with ErrStore, or nil. It is set
	// both when the caller got it and when a failure mode answered
	// instead (Decision.Source then says which).
	Err error
	// Latency is the time the store took.
	Latency time.Duration
	// DryRun reports a Limiter in dry-run mode: the caller was admitted
	// whatever Decision says.
	DryRun bool
}
