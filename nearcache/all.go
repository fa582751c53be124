package nearcache

import (
	"context"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
)

// Several requests at once: TakeAll and PeekAll answer the requests whose
// denials are cached, as Take and Peek do, and ask the store for the rest.

// TakeAll implements backend.Store (errors.ErrUnsupported if the store
// cannot). When a request of cost 1 has a cached denial, the step
// is denied here, without the store: nothing is recorded, the outcome of
// every request with a cached denial is that denial (what Peek says) and
// the others' are left zero, not decided (see backend.Store's TakeAll), so
// a flood through ratelimit.Multi (httplimit, grpclimit, ratelimitd) costs
// no round trip either, nor do the statuses of its other denied keys.
// Otherwise the store decides, and its denials of cost 1 are cached as
// Take's are.
func (s *Store) TakeAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) error {
	if len(outs) != len(reqs) {
		return s.next.TakeAll(ctx, reqs, outs)
	}
	if !s.trusted() {
		if err := s.next.TakeAll(ctx, reqs, outs); err != nil {
			return err
		}
		for i := range reqs {
			s.admitted(&reqs[i], outs[i])
		}
		return nil
	}
	denied := false
	for i := range reqs {
		if out, ok := s.lookup(&reqs[i]); ok {
			if !denied {
				clear(outs)
				denied = true
			}
			outs[i] = out
		}
	}
	if denied {
		s.hits.Add(1)
		return nil
	}
	gens := make([]generation, len(reqs))
	for i := range reqs {
		gens[i] = s.generation(reqs[i].Key)
	}
	sent := time.Now()
	err := s.next.TakeAll(ctx, reqs, outs)
	if err != nil {
		return err
	}
	for i := range reqs {
		if reqs[i].Cost == 1 {
			s.misses.Add(1)
			s.consider(&reqs[i], outs[i], sent, gens[i])
		}
		s.admitted(&reqs[i], outs[i])
	}
	return nil
}

// PeekAll implements backend.Store: the requests with a cached denial are
// answered here, as Peek's; the others are the store's, in one PeekAll
// (errors.ErrUnsupported if the store cannot).
func (s *Store) PeekAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) error {
	if len(outs) != len(reqs) || !s.trusted() {
		return s.next.PeekAll(ctx, reqs, outs)
	}
	var rest []int // the requests the store answers
	for i := range reqs {
		if out, ok := s.lookup(&reqs[i]); ok {
			outs[i] = out
		} else {
			rest = append(rest, i)
		}
	}
	if len(rest) < len(reqs) {
		s.hits.Add(1)
	}
	switch len(rest) {
	case 0:
		return nil
	case len(reqs):
		return s.next.PeekAll(ctx, reqs, outs)
	}
	sub, subOuts := make([]backend.Request, len(rest)), make([]backend.Outcome, len(rest))
	for j, i := range rest {
		sub[j] = reqs[i]
	}
	if err := s.next.PeekAll(ctx, sub, subOuts); err != nil {
		clear(outs)
		return err
	}
	for j, i := range rest {
		outs[i] = subOuts[j]
	}
	return nil
}

// ChargeAll implements backend.Store as Charge does, for each request: the
// keys' cached denials go, then the store records the usage
// (errors.ErrUnsupported if it cannot).
func (s *Store) ChargeAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) error {
	s.forgetAll(reqs)
	defer s.forgetAll(reqs) // as Reset
	return s.next.ChargeAll(ctx, reqs, outs)
}

// forgetAll forgets the key of each of reqs that has a rule.
func (s *Store) forgetAll(reqs []backend.Request) {
	for i := range reqs {
		if reqs[i].Rule != nil {
			s.forget(reqs[i].Rule.Prefix(), reqs[i].Key)
		}
	}
}
