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
	newStore, expire := expiringStores(0)
	conformance.Run(t, newStore, expire)
}

// The kit's expiry scenario holds on a busy machine: more real time passes
// between two of its steps (here 120 ms more, once) than it moves
// its clock. When the store's clock was real time plus the kit's moves,
// that dropped state that still counted ("the state was dropped while it
// still counted", seen beside busy loops).
func TestConformanceWhenStepsTakeLongerThanTheKitsClock(t *testing.T) {
	newStore, expire := expiringStores(120 * time.Millisecond)
	conformance.Run(t, newStore, expire)
}

// expiringStores is the kit's constructor of memory stores and its Expire
// option, lag being real time that passes at the first of the kit's steps. A
// store's clock is real time until the kit first asks it to expire; from
// then on it is its creation time plus what the kit says has elapsed, and
// nothing else.
func expiringStores(lag time.Duration) (conformance.NewStore, conformance.Option) {
	ahead := map[backend.Store]*atomic.Int64{}
	var mu sync.Mutex
	return conformance.InProcess(func(t *testing.T) backend.Store {
			created := time.Now()
			var by atomic.Int64 // how far the kit moved the store's clock from created; -1: not yet
			by.Store(-1)
			s, err := memory.New(memory.WithStoreClock(func() time.Time {
				if d := by.Load(); d >= 0 {
					return created.Add(time.Duration(d))
				}
				return time.Now()
			}))
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
			if by.Load() < 0 { // the first step: the store's clock would then stay ahead
				time.Sleep(lag)
			}
			by.Store(int64(elapsed))
			s.(*memory.Store).Sweep()
		})
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

func (o only) Acquire(ctx context.Context, r backend.Request, id int64) (backend.Outcome, error) {
	if err := o.check(r); err != nil {
		return backend.Outcome{}, err
	}
	return o.Store.Acquire(ctx, r, id)
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
