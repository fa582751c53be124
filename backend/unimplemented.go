package backend

import (
	"context"
	"errors"
	"fmt"
)

// Unimplemented answers the operations of Store that a store may leave out:
// TakeAll, PeekAll, Refund, Charge, ChargeAll, Acquire and Release with an
// error wrapping errors.ErrUnsupported (callers then decide, peek or charge
// several requests one by one, and cannot refund, charge or hold permits),
// and Info with the zero Info. Embed it in a store, which then
// implements Take, Peek and Reset, and whatever else it can, as the
// conformance kit's example store does.
type Unimplemented struct{}

// TakeAll implements Store: errors.ErrUnsupported.
func (Unimplemented) TakeAll(context.Context, []Request, []Outcome) error {
	return fmt.Errorf("ratelimit/backend: deciding several requests together: %w", errors.ErrUnsupported)
}

// PeekAll implements Store: errors.ErrUnsupported.
func (Unimplemented) PeekAll(context.Context, []Request, []Outcome) error {
	return fmt.Errorf("ratelimit/backend: peeking at several requests together: %w", errors.ErrUnsupported)
}

// Refund implements Store: errors.ErrUnsupported.
func (Unimplemented) Refund(context.Context, Request) (Outcome, error) {
	return Outcome{}, fmt.Errorf("ratelimit/backend: refunding: %w", errors.ErrUnsupported)
}

// Charge implements Store: errors.ErrUnsupported.
func (Unimplemented) Charge(context.Context, Request) (Outcome, error) {
	return Outcome{}, fmt.Errorf("ratelimit/backend: charging: %w", errors.ErrUnsupported)
}

// ChargeAll implements Store: errors.ErrUnsupported.
func (Unimplemented) ChargeAll(context.Context, []Request, []Outcome) error {
	return fmt.Errorf("ratelimit/backend: charging several requests together: %w", errors.ErrUnsupported)
}

// Acquire implements Store: errors.ErrUnsupported.
func (Unimplemented) Acquire(context.Context, Request, int64) (Outcome, error) {
	return Outcome{}, fmt.Errorf("ratelimit/backend: permits: %w", errors.ErrUnsupported)
}

// Release implements Store: errors.ErrUnsupported.
func (Unimplemented) Release(context.Context, Request, int64) (Outcome, error) {
	return Outcome{}, fmt.Errorf("ratelimit/backend: permits: %w", errors.ErrUnsupported)
}

// Info implements Store: the zero Info.
func (Unimplemented) Info() Info { return Info{} }
