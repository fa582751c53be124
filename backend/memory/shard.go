package memory

import (
	"fmt"
	"sync"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/algorithm"
	"github.com/ratelimit-go/ratelimit/internal/outcome"
)

type shard struct {
	mu         sync.Mutex
	keys       table
	entries    int // log entries held
	maxEntries int
	refuse     bool   // WhenFull is RefuseNewKeys
	stats      *stats // the store's
	policy     ratelimit.Policy
	rate       algorithm.Rate // policy's
	_          [64]byte       // no false sharing of locks between shards
}

// entry is what a shard holds for one key: a state per prefix and algorithm
// the key is used under. A key is looked up by its own string, the cheapest
// map key to hash; the few prefixes it lives under are then compared.
type entry struct {
	slots []slot // usually one: first
	first [1]slot
	// protected says the key was used again after it arrived (see table);
	// used is then its second-chance bit: a use sets it instead of moving
	// the key to the front of its list.
	protected, used bool
}

type slot struct {
	prefix string
	alg    ratelimit.Algorithm
	state
}

// state is a key's state under one algorithm: only that algorithm's field
// is used.
type state struct {
	log     algorithm.Log
	fixed   algorithm.Fixed
	counter algorithm.SlidingCounter
	bucket  algorithm.Bucket
	// expireAt is when the state may be dropped, on the store's clock (µs):
	// its life (or the request's retention) after its last write, as a
	// server's TTL counts. One clock decides what may be dropped, whatever
	// clock the requests are decided on.
	expireAt int64
}

// empty reports whether the state holds no history.
func (st *state) empty() bool {
	return st.log.Empty() && st.fixed.Empty() && st.counter.Empty() && st.bucket.Empty()
}

func newEntry() *entry {
	e := &entry{}
	e.slots = e.first[:0]
	return e
}

// slot is the state of the key under prefix and alg, or nil.
func (e *entry) slot(prefix string, alg ratelimit.Algorithm) *slot {
	for i := range e.slots {
		if sl := &e.slots[i]; sl.alg == alg && sl.prefix == prefix {
			return sl
		}
	}
	return nil
}

// idle reports whether every state of the key has expired at now (the
// store's clock).
func (e *entry) idle(now int64) bool {
	for i := range e.slots {
		if e.slots[i].expireAt > now {
			return false
		}
	}
	return true
}

// entries is the number of log entries the key holds.
func (e *entry) entries() int {
	n := 0
	for i := range e.slots {
		n += e.slots[i].log.Len()
	}
	return n
}

// take decides req at now on sl, a slot of the shard, whose lock is held,
// recording it if admitted; storeNow is the store's clock, which expiry is
// kept on.
func (sh *shard) take(sl *slot, req *ratelimit.Request, now, storeNow int64) algorithm.Outcome {
	r := sh.rateOf(&req.Policy)
	n := int64(req.Cost)
	var out algorithm.Outcome
	var life int64
	switch req.Policy.Algorithm {
	case ratelimit.FixedWindow:
		if out = sl.fixed.Take(now, r, n); out.Allowed {
			life = sl.fixed.Life(now, r)
		}
	case ratelimit.SlidingWindowCounter:
		if out = sl.counter.Take(now, r, n); out.Allowed {
			life = sl.counter.Life(now, r)
		}
	case ratelimit.GCRA:
		if out = sl.bucket.Take(now, r, n); out.Allowed {
			life = sl.bucket.Life(now, r)
		}
	default:
		held := sl.log.Len()
		if out = sl.log.Take(now, r, n); out.Allowed {
			life = sl.log.Life(now, r)
		}
		if grown := sl.log.Len() - held; grown != 0 { // a Take prunes, admitted or not
			sh.entries += grown
			if grown > 0 && sh.entries > sh.maxEntries {
				sh.shed(req.Key.ID, storeNow)
			}
		}
	}
	if out.Allowed { // a denial records nothing: the expiry stands
		sl.expireAt = max(sl.expireAt, storeNow+max(life, req.Retention().Microseconds()))
	}
	return out
}

// rateOf is p in the algorithms' units, from the shard's cache of the last
// policy seen (a store usually sees few): GCRA's units need a division
// loop. The shard's lock is held.
func (sh *shard) rateOf(p *ratelimit.Policy) algorithm.Rate {
	if *p != sh.policy {
		sh.policy, sh.rate = *p, outcome.Rate(*p)
	}
	return sh.rate
}

// op is what a decision does.
type op uint8

const (
	peek op = iota
	take
	refund
)

// decide does o for req at now on the shard, whose lock is held; storeNow
// is the store's clock, which expiry is kept on.
func (sh *shard) decide(req *ratelimit.Request, now, storeNow int64, o op) (algorithm.Outcome, error) {
	alg := req.Policy.Algorithm
	e, ok := sh.keys.get(req.Key.ID)
	var sl *slot
	if ok {
		sl = e.slot(req.Key.Prefix, alg)
	}
	if sl == nil {
		if o != take { // nothing stored: nothing to write
			var empty state
			if o == refund {
				return algorithm.Outcome{}, overRefund(req, 0)
			}
			return empty.decide(req, outcome.Rate(req.Policy), now, peek), nil
		}
		if !ok {
			e = newEntry()
			if !sh.add(req.Key.ID, e, storeNow) {
				return algorithm.Outcome{}, fmt.Errorf("%w (%d keys in this shard)", ErrFull, sh.keys.capacity)
			}
		}
		e.slots = append(e.slots, slot{prefix: req.Key.Prefix, alg: alg})
		sl = &e.slots[len(e.slots)-1]
	}
	if ok { // a key held before is used again; a new one waits on probation
		sh.keys.used(req.Key.ID, e)
	}
	r := sh.rateOf(&req.Policy)
	if o == peek {
		return sl.decide(req, r, now, peek), nil
	}
	if o == take {
		return sh.take(sl, req, now, storeNow), nil
	}
	held := sl.log.Len()
	out, ok := sl.refund(req, r, now)
	if !ok {
		return out, overRefund(req, sl.decide(req, r, now, peek).Count)
	}
	sl.expireAt = max(sl.expireAt, storeNow+max(sl.life(req, r, now), req.Retention().Microseconds()))
	if grown := sl.log.Len() - held; grown != 0 {
		sh.entries += grown
	}
	return out, nil
}

// overRefund is the error of a refund of more than the held quota.
func overRefund(req *ratelimit.Request, held int64) error {
	return fmt.Errorf("%w: a refund of %d, and %q holds %d", ratelimit.ErrInvalidCost, req.Cost, req.Key.ID, held)
}

// decide decides req at now (a peek or a take) under its algorithm.
func (st *state) decide(req *ratelimit.Request, r algorithm.Rate, now int64, o op) algorithm.Outcome {
	n := int64(req.Cost)
	switch req.Policy.Algorithm {
	case ratelimit.FixedWindow:
		if o == peek {
			return st.fixed.Peek(now, r, n)
		}
		return st.fixed.Take(now, r, n)
	case ratelimit.SlidingWindowCounter:
		if o == peek {
			return st.counter.Peek(now, r, n)
		}
		return st.counter.Take(now, r, n)
	case ratelimit.GCRA:
		if o == peek {
			return st.bucket.Peek(now, r, n)
		}
		return st.bucket.Take(now, r, n)
	}
	if o == peek {
		return st.log.Peek(now, r, n)
	}
	return st.log.Take(now, r, n)
}

func (st *state) refund(req *ratelimit.Request, r algorithm.Rate, now int64) (algorithm.Outcome, bool) {
	n := int64(req.Cost)
	switch req.Policy.Algorithm {
	case ratelimit.FixedWindow:
		return st.fixed.Refund(now, r, n)
	case ratelimit.SlidingWindowCounter:
		return st.counter.Refund(now, r, n)
	case ratelimit.GCRA:
		return st.bucket.Refund(now, r, n)
	}
	return st.log.Refund(now, r, n)
}

// life is how long after now (µs, on the request's clock) the state still
// matters under req's policy.
func (st *state) life(req *ratelimit.Request, r algorithm.Rate, now int64) int64 {
	switch req.Policy.Algorithm {
	case ratelimit.FixedWindow:
		return st.fixed.Life(now, r)
	case ratelimit.SlidingWindowCounter:
		return st.counter.Life(now, r)
	case ratelimit.GCRA:
		return st.bucket.Life(now, r)
	}
	return st.log.Life(now, r)
}

// shed evicts least recently used keys, never keep, until the shard's log
// entries are within its bound.
func (sh *shard) shed(keep string, now int64) {
	sh.keys.oldest(func(k string, v *entry) bool {
		if k != keep {
			if !v.idle(now) {
				sh.stats.activeEvictions.Add(1)
			}
			sh.remove(k, v)
		}
		return sh.entries > sh.maxEntries
	})
}

// remove drops key, whose entry is v.
func (sh *shard) remove(key string, v *entry) {
	sh.entries -= v.entries()
	sh.keys.remove(key, v)
}

// add inserts a new key on probation, making room when the shard is full
// (see table): an evicted key still inside its window is counted, or, when
// the store refuses new keys, the new key is refused instead (false).
func (sh *shard) add(key string, e *entry, now int64) bool {
	if sh.keys.full() {
		k, v, ok := sh.keys.victim(now)
		if ok && !v.idle(now) {
			if sh.refuse {
				sh.stats.refused.Add(1)
				return false
			}
			sh.stats.activeEvictions.Add(1)
		}
		if ok {
			sh.remove(k, v)
		}
	}
	sh.keys.add(key, e)
	return true
}

// unlock, deferred by whoever locked sh, releases its lock on every path: a
// decision that panicked (none is known to: the fuzz tests look for one)
// would otherwise leave every key of the shard blocked for good, and the
// panic itself comes back as an error, not into the caller's goroutine.
func (sh *shard) unlock(err *error) {
	if r := recover(); r != nil {
		*err = panicked(r)
	}
	sh.mu.Unlock()
}

// panicked is the error of a decision that panicked with r.
func panicked(r any) error {
	return fmt.Errorf("ratelimit/memory: a decision panicked: %v: %w", r, ratelimit.ErrStore)
}

func (sh *shard) len() int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.keys.len()
}
