package backend

import (
	"errors"
	"fmt"
)

// The sentinel errors of the contract, which package ratelimit exports under
// the same names (ratelimit.ErrInvalidCost is ErrInvalidCost): a store wraps
// one of them with detail, and callers test them with errors.Is. A request a
// store does not support (an algorithm it lacks, a TakeAll across shards)
// wraps errors.ErrUnsupported instead.
var (
	// ErrInvalidPolicy: a policy outside its bounds (see NewRule).
	ErrInvalidPolicy = errors.New("ratelimit: invalid policy")
	// ErrInvalidKey: an empty key, a key longer than MaxKeyLen bytes, or a
	// prefix longer than MaxPrefixLen bytes.
	ErrInvalidKey = errors.New("ratelimit: invalid key")
	// ErrInvalidCost: a cost outside [1, Rule.MaxCost], or a refund of more
	// than the key has in use.
	ErrInvalidCost = errors.New("ratelimit: invalid cost")
	// ErrInvalidArgument: any other bad input (a caller's time outside
	// [MinMicros, MaxMicros], a nil rule, store or context).
	ErrInvalidArgument = errors.New("ratelimit: invalid argument")
	// ErrStore: the store failed to decide (server down, timeout,
	// cancelled context...). A store may wrap it; the Limiter wraps every
	// other error of a store with it.
	ErrStore = errors.New("ratelimit: store failed")
	// ErrBudget is the cause (context.Cause) of a store call's context
	// whose deadline was the Limiter's time budget and has passed: the
	// store did not answer in time, its failure. A caller that went away,
	// or whose own deadline passed, gives its own cause instead; a layer
	// over a store (guard) tells the two apart by it.
	ErrBudget = errors.New("ratelimit: the time budget ran out")
)

// Unsupported is the error of a store asked to decide under an algorithm it
// does not support: it wraps errors.ErrUnsupported.
func Unsupported(store string, alg Algorithm) error {
	return fmt.Errorf("%s: the %v algorithm: %w", store, alg, errors.ErrUnsupported)
}

// Fallback is the error of decisions a stand-in made for a store that
// could not (package guard's fallback, on this instance's share of each
// rule): the outcomes beside it are those decisions, approximate, the i-th
// request's under Rules[i] (one rule for Take, Peek and Refund; the rules
// are shared, not to be changed). Err is why the store could not; a
// Fallback is a failure of the store, ErrStore (errors.Is). Package ratelimit makes of them Decisions whose Source is
// SourceFallback and whose Limit is that rule's MaxCost, without an error;
// a caller that does not look for it reads a failure, which it is.
type Fallback struct {
	Rules []*Rule
	Err   error
}

func (e *Fallback) Error() string { return "ratelimit: decided by a fallback: " + e.Err.Error() }

// Unwrap returns Err.
func (e *Fallback) Unwrap() error { return e.Err }

// Is reports target == ErrStore: whatever the cause, the store failed.
func (e *Fallback) Is(target error) bool { return target == ErrStore }

// ShardError is the error of a call on the keys of several shards of a
// store (TakeAll on a cluster) that failed on one shard: the shard that
// decides Key under Prefix. A layer that keeps the health of each node
// apart (package guard, over a store whose Info names nodes) charges the failure to that
// node alone, not to the nodes of the call's other keys.
type ShardError struct {
	Prefix, Key string
	Err         error
}

func (e *ShardError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *ShardError) Unwrap() error { return e.Err }
