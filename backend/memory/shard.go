package memory

import (
	"fmt"
	"sync"

	"github.com/ratelimit-go/ratelimit/algorithm"
	"github.com/ratelimit-go/ratelimit/backend"
)

// shard is a lock and the keys it guards.
type shard struct {
	mu         sync.Mutex
	keys       *table
	entries    int // log entries held
	maxEntries int
	refuse     bool   // WhenFull is RefuseNewKeys
	stats      *stats // the store's
	_          [64]byte
}

// op is what a decision does.
type op uint8

const (
	peek op = iota
	take
	refund
)

// decide does o for req at now on the shard, whose lock is held; h is the
// hash of req's state, storeNow the store's clock, which expiry is kept on.
func (sh *shard) decide(req *backend.Request, h uint64, now, storeNow int64, o op) (algorithm.Outcome, error) {
	r := req.Rule
	e := sh.keys.get(h, req.Key, r.Prefix(), r.Algorithm())
	if e == nil {
		switch o {
		case peek: // nothing stored: nothing to write
			return empty[r.Algorithm()].Peek(now, r.Rate(), req.Cost), nil
		case refund:
			return algorithm.Outcome{}, overRefund(req, 0)
		}
		var err error
		if e, err = sh.add(req, h, storeNow); err != nil {
			return algorithm.Outcome{}, err
		}
	} else {
		sh.keys.used(e) // a key held before is used again; a new one waits on probation
	}
	switch o {
	case peek:
		return e.st.Peek(now, r.Rate(), req.Cost), nil
	case take:
		var out algorithm.Outcome
		sh.take(e, req, now, storeNow, &out)
		return out, nil
	}
	held := e.entries()
	out, ok := e.st.Refund(now, r.Rate(), req.Cost)
	if !ok {
		return out, overRefund(req, e.st.Peek(now, r.Rate(), 1).Count)
	}
	e.wrote(storeNow, out.Life, r.Retain())
	sh.entries += e.entries() - held
	return out, nil
}

// take decides req at now on e into out, recording it if admitted; storeNow
// is the store's clock, which expiry is kept on.
func (sh *shard) take(e *entry, req *backend.Request, now, storeNow int64, out *algorithm.Outcome) {
	rate := req.Rule.Rate()
	if log, ok := e.st.(*algorithm.Log); ok {
		held := log.Len()
		log.TakeTo(now, &rate, req.Cost, out)
		e.wrote(storeNow, out.Life, req.Rule.Retain())
		if grown := log.Len() - held; grown != 0 { // a Take prunes, admitted or not
			sh.entries += grown
			if grown > 0 && sh.entries > sh.maxEntries {
				sh.shed(e, storeNow)
			}
		}
		return
	}
	switch st := e.st.(type) { // concrete calls: no Outcome copied, no interface hop
	case *algorithm.Bucket:
		st.TakeTo(now, &rate, req.Cost, out)
	case *algorithm.Fixed:
		st.TakeTo(now, &rate, req.Cost, out)
	case *algorithm.SlidingCounter:
		st.TakeTo(now, &rate, req.Cost, out)
	default:
		*out = e.st.Take(now, rate, req.Cost)
	}
	e.wrote(storeNow, out.Life, req.Rule.Retain())
}

// overRefund is the error of a refund of more than the held quota.
func overRefund(req *backend.Request, held int64) error {
	return fmt.Errorf("%w: a refund of %d, and %q holds %d", backend.ErrInvalidCost, req.Cost, req.Key, held)
}

// add makes a new key's entry on probation, making room when the shard is
// full (see table): an evicted key still inside its window is counted, or,
// when the store refuses new keys, the new key is refused instead.
func (sh *shard) add(req *backend.Request, h uint64, now int64) (*entry, error) {
	e := newEntry(req.Rule.Algorithm())
	if e == nil {
		return nil, backend.Unsupported("ratelimit/memory", req.Rule.Algorithm())
	}
	if sh.keys.full() {
		if v := sh.keys.victim(now); v != nil {
			if !v.idle(now) {
				if sh.refuse {
					sh.stats.refused.Add(1)
					return nil, fmt.Errorf("%w (%d keys in this shard)", ErrFull, sh.keys.capacity)
				}
				sh.stats.activeEvictions.Add(1)
			}
			sh.remove(v)
		}
	}
	e.key, e.prefix, e.hash, e.alg = req.Key, req.Rule.Prefix(), h, req.Rule.Algorithm()
	sh.keys.add(e)
	return e, nil
}

// shed evicts least recently used keys, never keep, until the shard's log
// entries are within its bound.
func (sh *shard) shed(keep *entry, now int64) {
	sh.keys.oldest(func(e *entry) bool {
		if e != keep {
			if !e.idle(now) {
				sh.stats.activeEvictions.Add(1)
			}
			sh.remove(e)
		}
		return sh.entries > sh.maxEntries
	})
}

// remove drops e.
func (sh *shard) remove(e *entry) {
	sh.entries -= e.entries()
	sh.keys.remove(e)
}

// sweep drops the shard's keys whose windows have all passed at now.
func (sh *shard) sweep(now int64) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	dropped := 0
	sh.keys.oldest(func(e *entry) bool {
		if e.idle(now) {
			sh.remove(e)
			dropped++
		}
		return true
	})
	return dropped
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
	return fmt.Errorf("ratelimit/memory: a decision panicked: %v: %w", r, backend.ErrStore)
}

func (sh *shard) len() int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.keys.n
}
