package memory_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/conformance"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.InProcess(func(t *testing.T) ratelimit.Store {
		s, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}))
}

// A store of some algorithms only gets a clean run with conformance.Supports
// (the suite once always crossed all four), and must refuse the others with
// errors.ErrUnsupported: here the memory store, restricted to the windows.
func TestConformanceOfAStoreOfSomeAlgorithms(t *testing.T) {
	windows := []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.SlidingWindow}
	conformance.Run(t, conformance.InProcess(func(t *testing.T) ratelimit.Store {
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
	algs []ratelimit.Algorithm
}

func (o only) check(reqs ...ratelimit.Request) error {
	for _, r := range reqs {
		if !slices.Contains(o.algs, r.Policy.Algorithm) {
			return fmt.Errorf("only %v: %w", o.algs, errors.ErrUnsupported)
		}
	}
	return nil
}

func (o only) Take(ctx context.Context, r ratelimit.Request) (ratelimit.Decision, error) {
	if err := o.check(r); err != nil {
		return ratelimit.Decision{}, err
	}
	return o.Store.Take(ctx, r)
}

func (o only) Peek(ctx context.Context, r ratelimit.Request) (ratelimit.Decision, error) {
	if err := o.check(r); err != nil {
		return ratelimit.Decision{}, err
	}
	return o.Store.Peek(ctx, r)
}

func (o only) Refund(ctx context.Context, r ratelimit.Request) (ratelimit.Decision, error) {
	if err := o.check(r); err != nil {
		return ratelimit.Decision{}, err
	}
	return o.Store.Refund(ctx, r)
}

func (o only) TakeAll(ctx context.Context, rs []ratelimit.Request) ([]ratelimit.Decision, error) {
	if err := o.check(rs...); err != nil {
		return nil, err
	}
	return o.Store.TakeAll(ctx, rs)
}
