package rediscore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
)

// A cluster decides in one script only the keys of one hash tag. TakeApart
// decides requests on keys of several tags (several shards, as per-user,
// per-IP and per-tenant limits are) in two steps, each one script per tag,
// the tags' scripts sent at once (one round trip per node, in parallel):
//
//  1. every group peeks (nothing written); if one would deny, the
//     requests are answered so, and nothing is recorded;
//  2. otherwise every group takes its requests together (each group all
//     or nothing, atomically on its shard).
//
// Between the steps another request may take the last quota of one
// group's key: that group then denies, and the other groups have taken
// theirs. The caller is denied, and counted against those other policies
// (at most its cost, once per such race), as ratelimit.Multi's one-by-one
// path counts it; nothing is ever admitted over a limit.

// Runner runs the script of several requests on keys (in the script's
// order, KeysAll) with op (Take: TakeAll; Peek) into outs: what a store's
// client does.
type Runner func(ctx context.Context, reqs []backend.Request, keys []string, op lua.Op, outs []backend.Outcome) error

// TakeAll is backend.Store's TakeAll for a store whose client runs the
// script with run: one script for every request on a single server
// (anyKeys) or for one hash tag; keys of several tags in two steps
// (TakeApart) if apart, else refused (ErrApart, wrapping
// errors.ErrUnsupported).
func TakeAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome, anyKeys, apart bool, run Runner) error {
	if err := CheckAll(reqs, outs); err != nil {
		return err
	}
	keys, err := KeysAll(reqs, anyKeys)
	switch {
	case errors.Is(err, ErrApart) && apart:
		return WithContext(ctx, TakeApart(ctx, reqs, outs, byTag(run)))
	case err != nil:
		return err
	}
	return WithContext(ctx, run(ctx, reqs, keys, lua.Take, outs))
}

// PeekAll is backend.Store's PeekAll for a store whose client runs the
// script with run: one script (op Look) for every request on a single
// server (anyKeys) or for one hash tag; keys of several tags by a script
// per tag, sent at once.
func PeekAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome, anyKeys bool, run Runner) error {
	if err := CheckAll(reqs, outs); err != nil {
		return err
	}
	return byTags(ctx, reqs, outs, anyKeys, lua.Look, run)
}

// ChargeAll is backend.Store's ChargeAll for a store whose client runs the
// script with run, as PeekAll peeks (op Charge): each request charged
// whatever the quota, and on keys of several tags, a group that fails
// leaves the other groups' charges made, their outcomes in outs.
func ChargeAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome, anyKeys bool, run Runner) error {
	if err := checkAll(reqs, outs, (*backend.Request).ValidateCharge); err != nil {
		return err
	}
	clear(outs)
	return byTags(ctx, reqs, outs, anyKeys, lua.Charge, run)
}

// byTags runs op on reqs: in one script on a single server (anyKeys) or
// for one hash tag; keys of several tags by a script per tag, sent at once.
// No request asks nothing of the server.
func byTags(ctx context.Context, reqs []backend.Request, outs []backend.Outcome, anyKeys bool, op lua.Op, run Runner) error {
	if len(reqs) == 0 {
		return nil
	}
	keys, err := KeysAll(reqs, anyKeys)
	switch {
	case errors.Is(err, ErrApart):
		groups, order := groupsOf(reqs)
		return WithContext(ctx, eachGroup(ctx, reqs, outs, groups, order, op, byTag(run)))
	case err != nil:
		return err
	}
	return WithContext(ctx, run(ctx, reqs, keys, op, outs))
}

// byTag is the GroupDecider of run: a group's requests share a hash tag.
func byTag(run Runner) GroupDecider {
	return func(ctx context.Context, group []backend.Request, op lua.Op, gouts []backend.Outcome) error {
		keys, err := KeysAll(group, false)
		if err != nil {
			return err
		}
		return run(ctx, group, keys, op, gouts)
	}
}

// GroupDecider decides the requests of one group (one hash tag) in one
// script with op (Take: TakeAll; Peek), into outs.
type GroupDecider func(ctx context.Context, reqs []backend.Request, op lua.Op, outs []backend.Outcome) error

// TakeApart decides reqs as described above, by the groups of their keys'
// hash tags, with decide; outs as backend.Store.TakeAll's, but that
// after a race outs hold the takes of the groups that took and the denials
// of the one that did not.
func TakeApart(ctx context.Context, reqs []backend.Request, outs []backend.Outcome, decide GroupDecider) error {
	groups, order := groupsOf(reqs)
	all := true
	if err := eachGroup(ctx, reqs, outs, groups, order, lua.Peek, decide); err != nil {
		return err
	}
	for i := range outs {
		all = all && outs[i].Allowed()
	}
	if !all {
		return nil
	}
	return eachGroup(ctx, reqs, outs, groups, order, lua.Take, decide)
}

// groupsOf are the indexes in reqs of the requests of each hash tag, and
// the tags in the order of their first request.
func groupsOf(reqs []backend.Request) (groups map[string][]int, order []string) {
	groups = map[string][]int{}
	for i, req := range reqs {
		tag := lua.Tag(req.Key)
		if _, ok := groups[tag]; !ok {
			order = append(order, tag)
		}
		groups[tag] = append(groups[tag], i)
	}
	return groups, order
}

// maxParallel bounds the groups decided at once: a request may carry many
// keys (a client controls how many descriptors it sends ratelimitd), and
// each group in flight holds a goroutine and, in the client, a connection.
const maxParallel = 64

// eachGroup runs decide on every group, up to maxParallel at once, with op,
// and gathers the outcomes into outs; the first error, if any, as a
// backend.ShardError naming a key of the group that failed.
func eachGroup(ctx context.Context, reqs []backend.Request, outs []backend.Outcome, groups map[string][]int, order []string, op lua.Op, decide GroupDecider) error {
	errs := make([]error, len(order))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(order), maxParallel) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := int(next.Add(1) - 1); g < len(order); g = int(next.Add(1) - 1) {
				errs[g] = decideGroup(ctx, reqs, outs, groups[order[g]], op, decide)
			}
		}()
	}
	wg.Wait()
	for g, err := range errs {
		if err != nil {
			first := reqs[groups[order[g]][0]]
			return fmt.Errorf("the requests on %q: %w", order[g], &backend.ShardError{Prefix: first.Rule.Prefix(), Key: first.Key, Err: err})
		}
	}
	return nil
}

// decideGroup decides the requests of reqs at idx, writing their outcomes
// into outs. A panic of the client, in this goroutine, is an error.
func decideGroup(ctx context.Context, reqs []backend.Request, outs []backend.Outcome, idx []int, op lua.Op, decide GroupDecider) (err error) {
	defer Recover("ratelimit", &err)
	greqs, gouts := make([]backend.Request, len(idx)), make([]backend.Outcome, len(idx))
	for j, i := range idx {
		greqs[j] = reqs[i]
	}
	if err = decide(ctx, greqs, op, gouts); err == nil {
		for j, i := range idx {
			outs[i] = gouts[j]
		}
	}
	return err
}

// CheckAll is Request.Validate for each of reqs, and checks that outs has
// room for their outcomes.
func CheckAll(reqs []backend.Request, outs []backend.Outcome) error {
	return checkAll(reqs, outs, (*backend.Request).Validate)
}

// checkAll is CheckAll with validate for Request.Validate.
func checkAll(reqs []backend.Request, outs []backend.Outcome, validate func(*backend.Request) error) error {
	if len(outs) != len(reqs) {
		return fmt.Errorf("%w: %d outcomes for %d requests", backend.ErrInvalidArgument, len(outs), len(reqs))
	}
	for i := range reqs {
		if err := validate(&reqs[i]); err != nil {
			return err
		}
		if reqs[i].Rule.Algorithm() == backend.InFlight {
			return backend.Unsupported("permits taken together", backend.InFlight)
		}
	}
	return nil
}

// KeysAll are the keys of several requests decided together, in the
// script's order. On a cluster (anyKeys false) one script may touch them all
// only if they share a hash tag: one caller's key under several policies;
// otherwise it fails, wrapping ErrApart (and errors.ErrUnsupported: see
// TakeApart). A single server (anyKeys) has no slots: any keys go together.
// Either way each request must have state of its own (else
// errors.ErrUnsupported).
func KeysAll(reqs []backend.Request, anyKeys bool) ([]string, error) {
	keys := make([]string, 0, len(reqs)+1)
	apart := false
	for i, req := range reqs {
		apart = apart || req.Key != reqs[0].Key
		for _, other := range reqs[:i] {
			if other.Key == req.Key && other.Rule.Prefix() == req.Rule.Prefix() && other.Rule.Algorithm() == req.Rule.Algorithm() {
				return nil, fmt.Errorf("two requests on the state of %q under %q: %w", req.Key, req.Rule.Prefix(), errors.ErrUnsupported)
			}
		}
		keys = lua.AppendKeys(keys, req)
	}
	if apart && !anyKeys {
		return nil, fmt.Errorf("%w: keys %q and others", ErrApart, reqs[0].Key)
	}
	return keys, nil
}

// ErrApart is KeysAll's error for requests on keys that may live on
// different shards of a cluster. It wraps errors.ErrUnsupported.
var ErrApart = fmt.Errorf("keys that may live on different shards: %w", errors.ErrUnsupported)
