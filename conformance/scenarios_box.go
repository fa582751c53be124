package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
)

// The penalty box (backend.Rule.Block): a client that misbehaved is kept
// out for a while, whatever its quota says.

// boxed is a checker of limit per window with a penalty box of block; the
// scenario is skipped on a store that keeps no boxes (Info.Blocks), which
// aDenialBlocksTheKey checks a Limiter refuses.
func (e *env) boxed(limit int, window, block time.Duration) *checker {
	e.t.Helper()
	if !e.newStore(e.t).Info().Blocks {
		e.t.Skip("the store keeps no penalty boxes (its Info().Blocks is false)")
	}
	c := e.checked(limit, window)
	c.setPolicy(c.policy.BlockFor(block))
	return c
}

// aDenialBlocksTheKey: under 3 per second with a box of a minute, the
// fourth request is denied and its key blocked: a peek, a take and a charge
// are denied for the minute though the window has long freed the quota,
// each saying the box's rest; a microsecond before its end still denied, at
// its end admitted. Other keys, and the key's state under another prefix,
// are not blocked. Reset lifts a block.
func aDenialBlocksTheKey(t *testing.T, e *env) {
	if s := e.newStore(t); !s.Info().Blocks {
		_, err := ratelimit.New(s, e.policy(3, time.Second).BlockFor(time.Minute))
		mustErrorIs(t, err, ratelimit.ErrInvalidPolicy, "a Limiter refuses a box on a store that keeps none")
		mustErrorIs(t, err, errors.ErrUnsupported)
		return
	}
	c := e.boxed(3, time.Second, time.Minute)
	for range 3 {
		mustTrue(t, c.allow("mallory").Allowed)
	}
	d := c.allow("mallory")
	mustFalse(t, d.Allowed, "over the limit")
	mustEqual(t, time.Minute, d.RetryAfter, "blocked for the box's length")
	mustEqual(t, 0, d.Remaining)
	for range 3 {
		mustTrue(t, c.allow("alice").Allowed, "another key is not blocked")
	}
	c.clock.Advance(5 * time.Second) // the window has freed the quota
	mustEqual(t, 55*time.Second, c.peek("mallory").RetryAfter, "a peek says the box's rest")
	mustFalse(t, c.allow("mallory").Allowed, "still blocked")
	if e.charges(e.newStore(t)) {
		mustFalse(t, c.charge("mallory", 1).Allowed, "a charge is recorded, and denied")
	}
	mustTrue(t, c.allow("alice").Allowed)
	other := e.checked(3, time.Second, ratelimit.WithPrefix(e.namespace()+"other:"))
	other.prefix = e.namespace() + "other:"
	other.setRule(other.policy)
	mustTrue(t, other.allow("mallory").Allowed, "the key under another prefix is not blocked")
	c.clock.Advance(55*time.Second - time.Microsecond)
	mustFalse(t, c.allow("mallory").Allowed, "a microsecond before the box ends")
	c.clock.Advance(time.Microsecond)
	mustTrue(t, c.allow("mallory").Allowed, "at the box's end")
	for range 3 {
		c.allow("mallory")
	}
	mustFalse(t, c.allow("mallory").Allowed, "blocked again")
	c.reset("mallory")
	mustTrue(t, c.allow("mallory").Allowed, "a reset lifts the block")
}

// onlyDenialsBlock: a peek that would deny blocks nothing; a refund does
// not lift a block; a charge past the quota blocks, one that fits does not.
func onlyDenialsBlock(t *testing.T, e *env) {
	c := e.boxed(2, time.Second, time.Hour)
	c.allowN("user", 2)
	mustFalse(t, c.peek("user").Allowed, "a full key")
	c.clock.Advance(2 * time.Second)
	mustTrue(t, c.allow("user").Allowed, "a peek blocked nothing")
	if _, ok := c.refund("user", 1); ok {
		c.allowN("user", 2)
		mustFalse(t, c.allow("user").Allowed, "blocked")
		c.refund("user", 1)
		mustFalse(t, c.allow("user").Allowed, "a refund does not lift the block")
	}
	if !e.charges(e.newStore(t)) {
		return
	}
	c.clock.Advance(2 * time.Hour)
	mustTrue(t, c.charge("tokens", 2).Allowed, "a charge that fits")
	c.clock.Advance(2 * time.Second)
	mustTrue(t, c.allow("tokens").Allowed, "blocked nothing")
	d := c.charge("tokens", 5)
	mustFalse(t, d.Allowed, "past the quota")
	mustEqual(t, time.Hour, d.RetryAfter, "blocked for the box's length")
	c.clock.Advance(time.Minute)
	mustFalse(t, c.peek("tokens").Allowed)
}

// aLivePolicyKeepsTheBlock: a block is the key's until it ends: a policy
// without a box ignores it, the box's policy back finds it still there.
func aLivePolicyKeepsTheBlock(t *testing.T, e *env) {
	c := e.boxed(1, time.Second, time.Minute)
	c.allow("user")
	mustFalse(t, c.allow("user").Allowed)
	boxed := c.policy
	c.clock.Advance(2 * time.Second)
	c.setPolicy(boxed.BlockFor(0))
	mustTrue(t, c.allow("user").Allowed, "no box: the quota decides")
	c.setPolicy(boxed)
	mustEqual(t, 58*time.Second, c.allow("user").RetryAfter, "the block is still there")
}

// takeAllBlocksWhatItDenies: a TakeAll denied by a policy with a box
// blocks that policy's key and records nothing in the others; a blocked
// key denies later TakeAlls; keys of another caller on another shard too
// (decided apart on a cluster).
func takeAllBlocksWhatItDenies(t *testing.T, e *env) {
	s := e.newStore(t)
	if !s.Info().Blocks {
		t.Skip("the store keeps no penalty boxes (its Info().Blocks is false)")
	}
	if !e.takesAll(s) {
		t.Skip("the store decides no requests together (its TakeAll is unsupported)")
	}
	model, ctx := NewModel(), context.Background()
	boxedPolicy := e.policy(2, time.Second).BlockFor(time.Minute)
	reqs := func(key string) []backend.Request {
		return []backend.Request{e.request("per-second:", key, boxedPolicy, 1), e.request("per-minute:", key, e.policy(10, time.Minute), 1)}
	}
	decide := func(what string, rs []backend.Request) []ratelimit.Decision {
		t.Helper()
		outs := make([]backend.Outcome, len(rs))
		err := s.TakeAll(ctx, rs, outs)
		if !supported(err) { // keys apart, on a store that decides them only together
			return nil
		}
		mustNoError(t, err, what)
		ds := make([]ratelimit.Decision, len(rs))
		for i, want := range model.TakeAll(rs) {
			ds[i] = decisionOf(outs[i], rs[i].Rule)
			mustDecide(t, decisionOf(want, rs[i].Rule), ds[i], "%s: request %d (%v)", what, i, rs[i].Rule)
		}
		return ds
	}
	decide("within both", reqs("user"))
	decide("within both", reqs("user"))
	got := decide("over the per-second limit", reqs("user"))
	mustFalse(t, got[0].Allowed)
	mustEqual(t, time.Minute, got[0].RetryAfter, "blocked")
	mustEqual(t, 2, got[1].Count, "nothing taken from the other")
	e.clock.Advance(2 * time.Second)
	got = decide("blocked", reqs("user"))
	mustFalse(t, got[0].Allowed)
	mustEqual(t, 58*time.Second, got[0].RetryAfter)

	for i := range 3 { // two callers: apart on a cluster
		rs := []backend.Request{e.request("per-second:", "alice", boxedPolicy, 1), e.request("per-second:", "bob", e.policy(2, time.Second), 1)}
		if got := decide(fmt.Sprintf("two callers, %d", i), rs); got == nil {
			return
		}
	}
	peek := func(key string, p ratelimit.Policy) bool {
		t.Helper()
		d, err := storeOf(s).Peek(ctx, e.request("per-second:", key, p, 1))
		mustNoError(t, err)
		return d.Allowed
	}
	mustFalse(t, peek("alice", boxedPolicy), "alice is blocked")
	e.clock.Advance(2 * time.Second)
	mustFalse(t, peek("alice", boxedPolicy), "still")
	mustTrue(t, peek("bob", e.policy(2, time.Second)), "bob is not")
}
