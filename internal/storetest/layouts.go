package storetest

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/conformance"
)

// Layouts runs the conformance kit on stores writing each key layout:
// newStore(t, n) is a store writing layout n on the package's server. The
// whole kit on a store whose calls alternate between one writing layout 1
// and one writing layout 2 (every answer as one store's, so instances
// writing either decide each key together: state moves between the
// layouts' keys), the store contract on layout 2 alone; and a layout out of
// bounds panics at construction.
func Layouts(t *testing.T, newStore func(t *testing.T, layout int) Store) {
	t.Run("calls alternating between layouts 1 and 2", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) backend.Store { return Alternating(newStore(t, 1), newStore(t, 2)) })
	})
	t.Run("layout 2", func(t *testing.T) {
		conformance.RunStore(t, func(t *testing.T) backend.Store { return newStore(t, 2) })
	})
	for _, n := range []int{0, -1, 3} {
		require.Panics(t, func() { newStore(t, n) }, "layout %d", n)
	}
}

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
