package ratelimit

import (
	"errors"
	"fmt"

	"github.com/ratelimit-go/ratelimit/backend"
)

// Sentinel errors. Errors returned by this module wrap one of them with
// detail, so test them with errors.Is. They are the backend contract's own
// (ratelimit.ErrStore is backend.ErrStore), so a store's errors match them.
var (
	// ErrInvalidPolicy is returned for a policy outside its bounds (see
	// Policy.Validate: a limit or burst not in [1, MaxLimit], a sliding
	// log over MaxLogLimit, a window not in [1ms, MaxWindow], a burst on a
	// window algorithm, an unknown algorithm), and a PolicyFunc that fails
	// or returns one of these.
	ErrInvalidPolicy = backend.ErrInvalidPolicy
	// ErrInvalidKey is returned for an empty key, a key longer than
	// MaxKeyLen bytes, or a prefix longer than MaxPrefixLen bytes.
	ErrInvalidKey = backend.ErrInvalidKey
	// ErrInvalidCost is returned when the cost n of AllowN or Refund is
	// not in [1, Policy.MaxCost()], and for a refund of more than the key
	// has in use.
	ErrInvalidCost = backend.ErrInvalidCost
	// ErrInvalidArgument is returned for a nil store, limiter or context,
	// or keys that do not match the limiters of a Multi.
	ErrInvalidArgument = backend.ErrInvalidArgument
	// ErrStore is returned when the store failed to decide (server down,
	// timeout, cancelled context...) and the Limiter has no failure mode
	// that answers instead. The store's own error is wrapped too, so
	// errors.Is(err, context.DeadlineExceeded) works as well.
	ErrStore = backend.ErrStore
)

// storeError wraps err with ErrStore unless a store already did, or it is
// the store's refusal, not its failure.
func storeError(err error) error {
	if errors.Is(err, ErrStore) || refused(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrStore, err)
}

// refused reports a store's refusal: input it will not decide (a request
// is validated once, by the store), or a call it does not support.
func refused(err error) bool {
	return errors.Is(err, ErrInvalidCost) || errors.Is(err, ErrInvalidKey) || errors.Is(err, ErrInvalidArgument) ||
		errors.Is(err, ErrInvalidPolicy) || errors.Is(err, errors.ErrUnsupported)
}
