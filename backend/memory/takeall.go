package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ratelimit-go/ratelimit/backend"
)

// TakeAll implements backend.Store: the shards of every request are locked
// (in a fixed order), then every request is peeked at and, if all would be
// admitted, taken. When every request is of a key being denied (see
// denials), on the default clock, they are decided without any lock.
func (s *Store) TakeAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(outs) != len(reqs) {
		return fmt.Errorf("ratelimit/memory: %w: %d outcomes for %d requests", backend.ErrInvalidArgument, len(outs), len(reqs))
	}
	hashes := make([]uint64, len(reqs))
	rds := make([]*ruled, len(reqs))
	shards := make([]uint64, 0, len(reqs))
	for i := range reqs {
		req := &reqs[i]
		if err := req.Validate(); err != nil {
			return err
		}
		if req.Rule.Algorithm() == backend.InFlight {
			return backend.Unsupported("ratelimit/memory: permits taken together", backend.InFlight)
		}
		if err := twice(reqs, i); err != nil {
			return err
		}
		rds[i] = ruleOf(req.Rule)
		hashes[i] = s.hash(req, rds[i])
		shards = append(shards, hashes[i]&s.mask)
	}
	if s.clock == nil && s.allDenied(reqs, rds, hashes, outs) {
		return nil
	}
	slices.Sort(shards) // locks are taken in one order: no deadlock between two TakeAlls
	shards = slices.Compact(shards)
	return s.takeAllLocked(shards, reqs, rds, hashes, outs)
}

// takeAllLocked decides reqs under the locks of shards (sorted), released
// on every path (see unlock).
func (s *Store) takeAllLocked(shards []uint64, reqs []backend.Request, rds []*ruled, hashes []uint64, outs []backend.Outcome) (err error) {
	for _, i := range shards {
		s.shards[i].mu.Lock()
	}
	defer func() {
		if r := recover(); r != nil {
			err = panicked(r)
		}
		for _, i := range shards {
			s.shards[i].mu.Unlock()
		}
	}()
	storeNow := s.micros() // one instant for the requests on the store's clock
	at := func(req *backend.Request) int64 {
		if req.Now != 0 {
			return req.Now
		}
		return storeNow
	}
	all := true
	for i := range reqs {
		sh := &s.shards[hashes[i]&s.mask]
		outs[i] = backend.Outcome{}
		_ = sh.decide(&reqs[i], rds[i], hashes[i], at(&reqs[i]), storeNow, peek, &outs[i]) // a peek stores nothing: never refused
		all = all && outs[i].Allowed()
	}
	for i := 0; !all && i < len(reqs) && err == nil; i++ { // the denied keys of a penalty box go there
		if !outs[i].Allowed() && rds[i].block > 0 {
			sh := &s.shards[hashes[i]&s.mask]
			err = sh.boxDenied(&reqs[i], rds[i], hashes[i], at(&reqs[i]), storeNow, &outs[i])
		}
	}
	for i := 0; all && i < len(reqs) && err == nil; i++ {
		// A full store refusing a new key (RefuseNewKeys) may do so after
		// an earlier request of the batch was recorded: the error is
		// returned all the same.
		sh := &s.shards[hashes[i]&s.mask]
		err = sh.decide(&reqs[i], rds[i], hashes[i], at(&reqs[i]), storeNow, take, &outs[i])
	}
	return err
}

// twice refuses reqs[i] if an earlier request is on its state.
func twice(reqs []backend.Request, i int) error {
	req := &reqs[i]
	for _, other := range reqs[:i] {
		if other.Key == req.Key && other.Rule.Algorithm() == req.Rule.Algorithm() && other.Rule.Prefix() == req.Rule.Prefix() {
			return fmt.Errorf("ratelimit/memory: two requests on the state of %q under %q: %w", req.Key, req.Rule.Prefix(), errors.ErrUnsupported)
		}
	}
	return nil
}

// ChargeAll implements backend.Store: each request's Charge, in order, in
// process (there is no round trip to save). Every request is checked
// before any is charged; on an error, the charges made are in outs.
func (s *Store) ChargeAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) error {
	if len(outs) != len(reqs) {
		return fmt.Errorf("ratelimit/memory: %w: %d outcomes for %d requests", backend.ErrInvalidArgument, len(outs), len(reqs))
	}
	for i := range reqs {
		if err := reqs[i].ValidateCharge(); err != nil {
			return err
		}
		if reqs[i].Rule.Algorithm() == backend.InFlight {
			return backend.Unsupported("ratelimit/memory: permits charged", backend.InFlight)
		}
		if err := twice(reqs, i); err != nil {
			return err
		}
	}
	clear(outs)
	for i := range reqs {
		out, err := s.Charge(ctx, reqs[i])
		if err != nil {
			return err
		}
		outs[i] = out
	}
	return nil
}

// PeekAll implements backend.Store: each request's Peek, in process (there
// is no round trip to save). On an error no outcome is given.
func (s *Store) PeekAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) error {
	if len(outs) != len(reqs) {
		return fmt.Errorf("ratelimit/memory: %w: %d outcomes for %d requests", backend.ErrInvalidArgument, len(outs), len(reqs))
	}
	for i := range reqs {
		out, err := s.Peek(ctx, reqs[i])
		if err != nil {
			clear(outs)
			return err
		}
		outs[i] = out
	}
	return nil
}
