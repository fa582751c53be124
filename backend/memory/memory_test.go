package memory_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/conformance"
)

// The memory store passes the kit, its sweeper included: the kit moves the
// store's clock as its own moves and sweeps, and nothing that still counts
// is dropped.
func TestConformance(t *testing.T) {
	ahead := map[backend.Store]*atomic.Int64{}
	var mu sync.Mutex
	conformance.Run(t, conformance.InProcess(func(t *testing.T) backend.Store {
		var by atomic.Int64 // how far the kit moved the store's clock ahead
		s, err := memory.New(memory.WithStoreClock(func() time.Time { return time.Now().Add(time.Duration(by.Load())) }))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		mu.Lock()
		ahead[s] = &by
		mu.Unlock()
		return s
	}), conformance.Expire(func(t *testing.T, s backend.Store, elapsed time.Duration) {
		mu.Lock()
		by := ahead[s]
		mu.Unlock()
		by.Store(int64(elapsed))
		s.(*memory.Store).Sweep()
	}))
}

// A store of some algorithms only gets a clean run with conformance.Supports
// (the suite once always crossed all four), and must refuse the others with
// errors.ErrUnsupported: here the memory store, restricted to the windows.
func TestConformanceOfAStoreOfSomeAlgorithms(t *testing.T) {
	windows := []backend.Algorithm{backend.FixedWindow, backend.SlidingWindow}
	conformance.Run(t, conformance.InProcess(func(t *testing.T) backend.Store {
		s, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return only{s, windows}
	}), conformance.Supports(windows...))
}

// only is a store that decides under algs and refuses the rest.
type only struct {
	*memory.Store
	algs []backend.Algorithm
}

func (o only) check(reqs ...backend.Request) error {
	for _, r := range reqs {
		if r.Rule != nil && !slices.Contains(o.algs, r.Rule.Algorithm()) {
			return fmt.Errorf("only %v: %w", o.algs, errors.ErrUnsupported)
		}
	}
	return nil
}

func (o only) Take(ctx context.Context, r backend.Request) (backend.Outcome, error) {
	if err := o.check(r); err != nil {
		return backend.Outcome{}, err
	}
	return o.Store.Take(ctx, r)
}

func (o only) Peek(ctx context.Context, r backend.Request) (backend.Outcome, error) {
	if err := o.check(r); err != nil {
		return backend.Outcome{}, err
	}
	return o.Store.Peek(ctx, r)
}

func (o only) Refund(ctx context.Context, r backend.Request) (backend.Outcome, error) {
	if err := o.check(r); err != nil {
		return backend.Outcome{}, err
	}
	return o.Store.Refund(ctx, r)
}

func (o only) TakeAll(ctx context.Context, rs []backend.Request, outs []backend.Outcome) error {
	if err := o.check(rs...); err != nil {
		return err
	}
	return o.Store.TakeAll(ctx, rs, outs)
}
