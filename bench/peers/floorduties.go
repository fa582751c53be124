package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/keyhash"
)

// dutiesFloor is the Decision floor (floordecision.go) with the duties a
// store behind Limiter.Allow cannot drop, each in its cheapest form: the
// Limiter's checks of its arguments, a call through the store contract
// (backend.Request in, backend.Outcome out, by value, through an
// interface), the store's check of the request, a lock released by a
// deferred Unlock, a bound on keys, a key's expiry kept, a use marked for
// eviction, a clock behind the key's, a state written under another rate.
// Its GCRA, Decision and hash of a key are the store's. It is a prototype of the memory
// store's path at its least, not a store to ship (one rule, eviction by
// dropping any key): what it costs, a rewrite of the store's path could not
// beat.
func dutiesFloor() maker {
	return maker{name: "floor: 64 locks, a Decision, the duties", peer: true, open: func(limit int, window time.Duration, _ string) (contender, error) {
		rule, err := backend.NewRule(backend.GCRA, int64(limit), window, int64(limit), window, "floor:")
		if err != nil {
			return contender{}, err
		}
		f := &dutiesFront{rule: rule, store: newDutiesStore(rule, 100_000)}
		return contender{close: func() {}, allow: func(ctx context.Context, key string) (bool, error) {
			var d ratelimit.Decision
			err := f.allowTo(ctx, key, 1, &d)
			return d.Allowed, err
		}}, nil
	}}
}

// taker is the part of backend.Store the floor calls, through an interface
// as the Limiter calls its store.
type taker interface {
	Take(ctx context.Context, req backend.Request) (backend.Outcome, error)
}

var errFloorArgs = errors.New("floor: bad arguments")

// dutiesFront is the Limiter's part: the arguments checked, the request
// made, the store's Outcome turned into a Decision.
type dutiesFront struct {
	rule  *backend.Rule
	store taker
}

//go:noinline
func (f *dutiesFront) allowTo(ctx context.Context, key string, n int, d *ratelimit.Decision) error {
	if ctx == nil || key == "" || len(key) > backend.MaxKeyLen || n < 1 || int64(n) > f.rule.MaxCost() {
		return errFloorArgs
	}
	out, err := f.store.Take(ctx, backend.Request{Rule: f.rule, Key: key, Cost: int64(n)})
	if err != nil {
		return err
	}
	d.Allowed = out.Allowed()
	d.Limit = int(f.rule.MaxCost())
	d.Remaining, d.Count = int(max(f.rule.MaxCost()-out.Count, 0)), int(out.Count)
	d.ResetAt = time.UnixMicro(out.ResetAt)
	d.RetryAfter = time.Duration(out.RetryAfter) * time.Microsecond
	d.At = time.UnixMicro(out.At)
	d.Source = ratelimit.SourceStore
	return nil
}

// dutiesStore is the store's part: 64 shards of Go maps, bounded.
type dutiesStore struct {
	rule               *backend.Rule
	seed               keyhash.Seed
	start              time.Time
	startMicros        int64
	burst, unit, drain int64
	retain, max        int64 // µs; keys a shard
	shards             [64]dutiesShard
}

// dutiesShard files each key's state under the key's one hash (the shard
// is its low bits), as the store's index does: a Go map keyed by the
// string would hash the key a second time. A key whose hash another key
// holds is kept in others.
type dutiesShard struct {
	mu     sync.Mutex
	states map[uint64]*dutiesState
	others map[string]*dutiesState
	_      [40]byte
}

// dutiesState is a key's bucket (at, level, under unit and drain), when it
// may be dropped, whether it was used since the sweep passed, and its key:
// 64 bytes.
type dutiesState struct {
	at, level, unit, drain, expireAt int64
	key                              string
	used                             bool
	_                                [7]byte
}

func newDutiesStore(rule *backend.Rule, maxKeys int64) *dutiesStore {
	start, r := time.Now(), rule.Rate()
	s := &dutiesStore{rule: rule, seed: keyhash.NewSeed(), start: start, startMicros: start.UnixMicro(), burst: r.Burst, unit: r.Unit, drain: r.Drain, retain: rule.Retain(), max: maxKeys / 64}
	for i := range s.shards {
		s.shards[i].states, s.shards[i].others = map[uint64]*dutiesState{}, map[string]*dutiesState{}
	}
	return s
}

func (s *dutiesStore) Take(ctx context.Context, req backend.Request) (out backend.Outcome, err error) {
	if err = ctx.Err(); err != nil {
		return
	}
	if req.Rule != s.rule || req.Cost < 1 || req.Cost > s.burst || req.Now != 0 || req.Key == "" || len(req.Key) > backend.MaxKeyLen {
		return out, errFloorArgs
	}
	h := keyhash.String(s.seed, req.Key)
	sh := &s.shards[h%64]
	now := s.startMicros + int64(time.Since(s.start)/time.Microsecond)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st := sh.states[h]
	if st == nil || st.key != req.Key {
		st = s.enter(sh, h, req.Key, st)
	}
	s.take(st, now, req.Cost, &out)
	return out, nil
}

// enter is key's state in sh, made if new: the bound's and a collision's
// cold path. held is the state under key's hash h, of another key.
func (s *dutiesStore) enter(sh *dutiesShard, h uint64, key string, held *dutiesState) *dutiesState {
	if held != nil {
		if st := sh.others[key]; st != nil {
			return st
		}
	}
	if int64(len(sh.states)+len(sh.others)) >= s.max {
		for k := range sh.states { // any key
			delete(sh.states, k)
			break
		}
	}
	st := &dutiesState{unit: s.unit, drain: s.drain, key: key}
	if held != nil {
		sh.others[key] = st
	} else {
		sh.states[h] = st
	}
	return st
}

// take is the store's GCRA on st at now (algorithm.Bucket's arithmetic).
func (s *dutiesStore) take(st *dutiesState, now, n int64, out *backend.Outcome) {
	if st.level > 0 && st.at > now { // a clock behind the key's: the key's time
		now = st.at
	}
	if st.unit != s.unit || st.drain != s.drain { // written under another rate: at most a burst
		st.level = min(ceilDiv(st.level, st.unit), s.burst) * s.unit
		st.unit, st.drain = s.unit, s.drain
	}
	capacity := s.burst * s.unit
	level := max(st.level-(now-st.at)*s.drain, 0)
	out.Count, out.ResetAt, out.RetryAfter, out.At = 0, now, 0, now
	if level+n*s.unit > capacity {
		out.RetryAfter = max(ceilDiv(level+n*s.unit-capacity, s.drain), 1)
	} else {
		level += n * s.unit
		st.at, st.level = now, level
		st.expireAt = max(st.expireAt, now+max(ceilDiv(level, s.drain), s.retain))
	}
	if !st.used {
		st.used = true
	}
	if level > 0 {
		count := s.burst // a full bucket, the common denial: no division
		if capacity-level >= s.unit {
			count = ceilDiv(level, s.unit)
		}
		out.Count, out.ResetAt = count, now+ceilDiv(level-(count-1)*s.unit, s.drain)
	}
}
