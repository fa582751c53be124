package storetest

import (
	"context"
	"sync/atomic"

	"github.com/ratelimit-go/ratelimit/backend"
)

// Store is what Alternating needs of each store: every ability of the Redis
// and Valkey stores that the conformance kit drives.
type Store interface {
	backend.MultiStore
	backend.RefundStore
}

// Alternating is one store made of two on the same server (built to write
// different key layouts): each call goes to the next one in turn, as
// requests of one key reach instances of a deployment half-way through
// changing the layout it writes. Every answer must be what one store would
// give: the conformance kit run on it proves that the layouts read each
// other's state and move it, exactly.
func Alternating(a, b Store) Store {
	return &alternating{stores: [2]Store{a, b}}
}

type alternating struct {
	stores [2]Store
	next   atomic.Uint64
}

func (s *alternating) pick() Store { return s.stores[s.next.Add(1)%2] }

func (s *alternating) Take(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.pick().Take(ctx, req)
}

func (s *alternating) Peek(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.pick().Peek(ctx, req)
}

func (s *alternating) Refund(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.pick().Refund(ctx, req)
}

func (s *alternating) TakeAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) error {
	return s.pick().TakeAll(ctx, reqs, outs)
}

func (s *alternating) Reset(ctx context.Context, prefix, key string) error {
	return s.pick().Reset(ctx, prefix, key)
}
