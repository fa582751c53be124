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
