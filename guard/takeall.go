package guard

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ratelimit-go/ratelimit/backend"
)

// TakeAll implements backend.Store: the primary's (errors.ErrUnsupported
// when it cannot), and while the primary cannot answer, the fallback's. On a cluster the requests' keys may live on several nodes: the
// primary is asked only while the breaker of every one of them lets it,
// and a failure is charged to the node it failed on when the store says
// (a backend.ShardError), else to each of them.
func (s *Store) TakeAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) error {
	return s.all(ctx, reqs, outs, backend.Store.TakeAll, false)
}

// PeekAll implements backend.Store as TakeAll does: the primary's through
// the breakers of its nodes, the fallback's (this instance's share) while
// the primary cannot answer.
func (s *Store) PeekAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) error {
	return s.all(ctx, reqs, outs, backend.Store.PeekAll, false)
}

// ChargeAll implements backend.Store as TakeAll does: the primary's
// through the breakers of its nodes, the fallback's (each charge against
// this instance's share) while the primary cannot answer.
func (s *Store) ChargeAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) error {
	return s.all(ctx, reqs, outs, backend.Store.ChargeAll, true)
}

// several is an operation on several requests: TakeAll, PeekAll or
// ChargeAll.
type several func(backend.Store, context.Context, []backend.Request, []backend.Outcome) error

// all asks op of the primary, or of the fallback (see TakeAll); charge
// says op is ChargeAll, whose costs may pass a rule's MaxCost.
func (s *Store) all(ctx context.Context, reqs []backend.Request, outs []backend.Outcome, op several, charge bool) error {
	if len(outs) != len(reqs) {
		return fmt.Errorf("ratelimit/guard: %w: %d outcomes for %d requests", backend.ErrInvalidArgument, len(outs), len(reqs))
	}
	for i := range reqs {
		if reqs[i].Rule == nil {
			return errNoRule
		}
	}
	if err := ctx.Err(); err != nil {
		if callerDone(ctx) {
			return err
		}
		return s.localAll(ctx, reqs, outs, op, charge, fmt.Errorf("ratelimit/guard: the time budget ran out before the call: %w: %w", backend.ErrStore, err))
	}
	// The breakers and their probes in arrays of the call's: a call of a
	// few nodes allocates nothing (ratelimitd's three descriptors a request
	// paid three allocations here).
	var bsOf [4]*breaker
	var probesOf [4]bool
	bs := s.breakersOf(reqs, bsOf[:0])
	probes, allowed := allowAll(bs, probesOf[:0])
	if !allowed {
		return s.localAll(ctx, reqs, outs, op, charge, fmt.Errorf("%w: %w", ErrOpen, backend.ErrStore))
	}
	err := op(s.primary, ctx, reqs, outs)
	o, blamed := judge(ctx, err), (*breaker)(nil)
	if o == failure {
		blamed = s.blamed(err)
	}
	doneAll(bs, probes, o, blamed)
	if err == nil || errors.Is(err, errors.ErrUnsupported) || callerGone(ctx) {
		return err
	}
	return s.localAll(ctx, reqs, outs, op, charge, err)
}

// blamed is the breaker of the node a failed call blames (a ShardError
// names it), else nil. Its own function: the target errors.As takes
// escapes, and a call that did not fail allocates none.
func (s *Store) blamed(err error) *breaker {
	var shard *backend.ShardError
	if errors.As(err, &shard) {
		return s.breakerFor(shard.Prefix, shard.Key)
	}
	return nil
}

// breakersOf appends to bs the breakers of the nodes that decide reqs,
// each once.
func (s *Store) breakersOf(reqs []backend.Request, bs []*breaker) []*breaker {
	for i := range reqs {
		if b := s.breakerFor(reqs[i].Rule.Prefix(), reqs[i].Key); !slices.Contains(bs, b) {
			bs = append(bs, b)
		}
	}
	return bs
}

// allowAll reports whether each of bs lets a call through, appending to
// probes which let it through as their probe; when one does not, the
// probes the others granted are given back, unused.
func allowAll(bs []*breaker, probes []bool) ([]bool, bool) {
	for i, b := range bs {
		ok, probe := b.allow()
		if !ok {
			doneAll(bs[:i], probes, excluded, nil)
			return nil, false
		}
		probes = append(probes, probe)
	}
	return probes, true
}

// doneAll records o on each of bs; with blamed, a failure on blamed alone,
// the call saying nothing of the others.
func doneAll(bs []*breaker, probes []bool, o outcome, blamed *breaker) {
	for i, b := range bs {
		if blamed != nil && b != blamed {
			b.done(probes[i], excluded)
		} else {
			b.done(probes[i], o)
		}
	}
	if blamed != nil && !slices.Contains(bs, blamed) {
		blamed.done(false, o)
	}
}
