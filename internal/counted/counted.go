// Package counted wraps a backend.Store and counts the calls of each
// operation that reach it, for the tests that check what a layer or a
// front end asks of its store (a near cache that answers alone, one call
// where there were several).
package counted

import (
	"context"
	"sync/atomic"

	"github.com/ratelimit-go/ratelimit/backend"
)

// Store is the store it embeds, counting each operation's calls; every
// other operation and Info are the embedded store's.
type Store struct {
	backend.Store
	Takes, Peeks, TakeAlls, PeekAlls, Charges, ChargeAlls, Acquires atomic.Int64
}

// New counts the calls that reach next.
func New(next backend.Store) *Store { return &Store{Store: next} }

// Calls is the calls counted, of every operation.
func (s *Store) Calls() int64 {
	return s.Takes.Load() + s.Peeks.Load() + s.TakeAlls.Load() + s.PeekAlls.Load() + s.Charges.Load() + s.ChargeAlls.Load() + s.Acquires.Load()
}

// Take implements backend.Store.
func (s *Store) Take(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	s.Takes.Add(1)
	return s.Store.Take(ctx, req)
}

// Peek implements backend.Store.
func (s *Store) Peek(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	s.Peeks.Add(1)
	return s.Store.Peek(ctx, req)
}

// TakeAll implements backend.Store.
func (s *Store) TakeAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) error {
	s.TakeAlls.Add(1)
	return s.Store.TakeAll(ctx, reqs, outs)
}

// PeekAll implements backend.Store.
func (s *Store) PeekAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) error {
	s.PeekAlls.Add(1)
	return s.Store.PeekAll(ctx, reqs, outs)
}

// Charge implements backend.Store.
func (s *Store) Charge(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	s.Charges.Add(1)
	return s.Store.Charge(ctx, req)
}

// ChargeAll implements backend.Store.
func (s *Store) ChargeAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) error {
	s.ChargeAlls.Add(1)
	return s.Store.ChargeAll(ctx, reqs, outs)
}

// Acquire implements backend.Store.
func (s *Store) Acquire(ctx context.Context, req backend.Request, id int64) (backend.Outcome, error) {
	s.Acquires.Add(1)
	return s.Store.Acquire(ctx, req, id)
}
