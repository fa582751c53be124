package conformance

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
)

// Scenarios about what is not a decision: bad input, and a store that
// cannot answer.

func rejectsInvalidInput(t *testing.T, e *env) {
	c := e.checked(3, time.Second)
	ctx := context.Background()
	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"empty key", func() error { _, err := c.l.Allow(ctx, ""); return err }, ratelimit.ErrInvalidKey},
		{"key over MaxKeyLen", func() error {
			_, err := c.l.Allow(ctx, string(make([]byte, ratelimit.MaxKeyLen+1)))
			return err
		}, ratelimit.ErrInvalidKey},
		{"peek of an empty key", func() error { _, err := c.l.Peek(ctx, ""); return err }, ratelimit.ErrInvalidKey},
		{"reset of an empty key", func() error { return c.l.Reset(ctx, "") }, ratelimit.ErrInvalidKey},
		{"n = 0", func() error { _, err := c.l.AllowN(ctx, "user", 0); return err }, ratelimit.ErrInvalidCost},
		{"n < 0", func() error { _, err := c.l.AllowN(ctx, "user", -1); return err }, ratelimit.ErrInvalidCost},
		{"n > limit", func() error { _, err := c.l.AllowN(ctx, "user", 4); return err }, ratelimit.ErrInvalidCost},
		{"nil context", func() error {
			var nilCtx context.Context
			_, err := c.l.Allow(nilCtx, "user")
			return err
		}, ratelimit.ErrInvalidArgument},
		{"limit 0", func() error { return c.l.SetPolicy(e.policy(0, time.Second)) }, ratelimit.ErrInvalidPolicy},
		{"negative limit", func() error { return c.l.SetPolicy(e.policy(-1, time.Second)) }, ratelimit.ErrInvalidPolicy},
		{"window 0", func() error { return c.l.SetPolicy(e.policy(3, 0)) }, ratelimit.ErrInvalidPolicy},
		{"negative window", func() error { return c.l.SetPolicy(e.policy(3, -time.Second)) }, ratelimit.ErrInvalidPolicy},
		{"sub-millisecond window", func() error { return c.l.SetPolicy(e.policy(3, time.Millisecond-1)) }, ratelimit.ErrInvalidPolicy},
		{"unknown algorithm", func() error {
			return c.l.SetPolicy(ratelimit.Policy{Limit: 3, Window: time.Second, Algorithm: 9})
		}, ratelimit.ErrInvalidPolicy},
	}
	for _, tc := range cases {
		err := tc.call()
		mustErrorIs(t, err, tc.want, tc.name)
	}
	mustEqual(t, e.policy(3, time.Second), c.l.Policy(), "invalid policies changed nothing")
	d := c.peek("user")
	mustEqual(t, 0, d.Count, "invalid calls recorded nothing")
	_, err := ratelimit.New(nil, e.policy(1, time.Second))
	mustErrorIs(t, err, ratelimit.ErrInvalidArgument, "nil store")
	_, err = ratelimit.New(e.newStore(t), e.policy(1, time.Second), ratelimit.WithPrefix(string(make([]byte, ratelimit.MaxPrefixLen+1))))
	mustErrorIs(t, err, ratelimit.ErrInvalidKey, "a prefix over MaxPrefixLen")
}

func cancelledContext(t *testing.T, e *env) {
	l := e.limiter(3, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() {
		_, err := l.Allow(ctx, "user")
		done <- err
	}()
	select {
	case err := <-done:
		mustErrorIs(t, err, ratelimit.ErrStore)
		mustErrorIs(t, err, context.Canceled, "the context's error is wrapped")
	case <-time.After(5 * time.Second):
		t.Fatal("Allow with a cancelled context did not return within 5s")
	}
	d, err := l.Peek(context.Background(), "user")
	mustNoError(t, err)
	mustEqual(t, 0, d.Count, "a cancelled call records nothing")

	ctx, cancel = context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	_, err = l.Allow(ctx, "user")
	mustErrorIs(t, err, context.DeadlineExceeded)
}

// refusesWhatItCannotDecide calls the store itself with requests no
// Limiter sends: a cost outside [1, MaxCost] (a cost over the limit once
// divided by zero in the memory store's counter, a panic that left a lock
// held) and a caller's time outside [backend.MinMicros, backend.MaxMicros] µs (a time before the
// epoch once made a server's script run forever). Every method refuses
// them with the sentinel, and nothing is recorded.
func refusesWhatItCannotDecide(t *testing.T, e *env) {
	s, ctx := storeOf(e.newStore(t)), context.Background()
	p := e.policy(3, time.Second)
	bad := []struct {
		name string
		req  backend.Request
		want error
	}{
		{"cost 0", e.request("", "user", p, 0), ratelimit.ErrInvalidCost},
		{"a cost over MaxCost", e.request("", "user", p, p.MaxCost()+1), ratelimit.ErrInvalidCost},
		{"an empty key", e.request("", "", p, 1), ratelimit.ErrInvalidKey},
		{"no rule", backend.Request{Key: "user", Cost: 1}, ratelimit.ErrInvalidArgument},
		{"a time before the epoch", e.request("", "user", p, 1), ratelimit.ErrInvalidArgument},
		{"a time after MaxMicros", e.request("", "user", p, 1), ratelimit.ErrInvalidArgument},
	}
	bad[4].req.Now = -1 // before the epoch (0 is the store's clock)
	bad[5].req.Now = backend.MaxMicros + 1
	for _, b := range bad {
		_, err := s.Take(ctx, b.req)
		mustErrorIs(t, err, b.want, "Take: %s", b.name)
		_, err = s.Peek(ctx, b.req)
		mustErrorIs(t, err, b.want, "Peek: %s", b.name)
		if e.refunds(s.Store) {
			_, err = s.Store.Refund(ctx, b.req)
			mustErrorIs(t, err, b.want, "Refund: %s", b.name)
		}
		if e.takesAll(s.Store) {
			_, err = s.TakeAll(ctx, []backend.Request{b.req})
			mustErrorIs(t, err, b.want, "TakeAll: %s", b.name)
		}
	}
	for _, edge := range []int64{backend.MinMicros, backend.MaxMicros} {
		req := e.request("", "edge", p, 1)
		req.Now = edge
		_, err := s.Peek(ctx, req)
		mustNoError(t, err, "a peek at %v, within the bounds", edge)
	}
	d, err := s.Peek(ctx, e.request("", "user", p, 1))
	mustNoError(t, err)
	mustZero(t, d.Count, "the refused requests recorded nothing")

	// Through a Limiter, a caller's clock before the epoch is refused too.
	l, err := ratelimit.New(s.Store, p, ratelimit.WithPrefix(e.namespace()),
		ratelimit.WithCallerClock(func() time.Time { return time.Unix(-2, 0) }))
	mustNoError(t, err)
	_, err = l.Allow(ctx, "user")
	mustErrorIs(t, err, ratelimit.ErrInvalidArgument, "a Limiter's clock before the epoch")
	mustNotErrorIs(t, err, ratelimit.ErrStore, "refused before the store")
}

// refusesUnsupported requires every method of a store to refuse an
// algorithm it does not support with an error wrapping
// errors.ErrUnsupported, recording nothing.
func refusesUnsupported(t *testing.T, newStore NewStore, supported []backend.Algorithm) {
	s, ctx := storeOf(newStore(t)), context.Background()
	e := &env{t: t, newStore: newStore}
	for _, a := range backend.Algorithms() {
		alg := a
		if slices.Contains(supported, a) {
			continue
		}
		req := e.request("", "user", policyOf(alg, 3, time.Minute), 1)
		_, err := s.Take(ctx, req)
		mustErrorIs(t, err, errors.ErrUnsupported, "Take under %v", alg)
		_, err = s.Peek(ctx, req)
		mustErrorIs(t, err, errors.ErrUnsupported, "Peek under %v", alg)
		_, err = s.Store.Refund(ctx, req)
		mustErrorIs(t, err, errors.ErrUnsupported, "Refund under %v", alg)
		_, err = s.TakeAll(ctx, []backend.Request{req})
		mustErrorIs(t, err, errors.ErrUnsupported, "TakeAll under %v", alg)
	}
}
