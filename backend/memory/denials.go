package memory

import (
	"sync/atomic"
	"unique"

	"github.com/ratelimit-go/ratelimit/algorithm"
	"github.com/ratelimit-go/ratelimit/backend"
)

// denials is where a table publishes the keys it is denying, so that a
// Take of such a key is decided without the shard's lock: the common case
// under abuse, a key hammered past its limit, costs no atomic write (a
// lock's two cost a sixth of a decision) and takes turns with no other
// goroutine.
//
// A published denial is an immutable copy of the record's state, made by a
// Take that denied and left the state as it was (a log's is the part its
// denials read, algorithm.LogDenial, copied after the Take pruned it); a
// reader decides on it with the algorithm's DeniesTo, and takes the lock
// whenever that declines (the window passed, the state is from the future,
// a log's entries past the copy's) or finds no copy. The
// copy is exact because it is withdrawn, under the lock, before anything
// writes the state: every such path goes through table.used or
// table.remove, and each withdraws it. A copy exists only for a key marked
// used, and the sweep that clears the mark withdraws it, so a key denied
// without the lock is never evicted before one used since.
//
// The slots are a cache on the key's tag, twice as many as the index has
// (they grow with it, the copies moved over): a key's copy is in the first
// free one of the ways slots from its home (the tag's low bits), most often
// the home itself, and a reader stops at a free slot, so that a Take of a
// key with no copy seldom reads another's. A copy a withdrawal left behind
// a free slot is missed, and made again, nearer its home, by the key's
// next Take under the lock. A key whose ways are all taken is not
// published, and its Takes go through the lock; a published key is never
// displaced, so keys sharing slots do not take turns copying their states
// (docs/figures.md measures the other layouts).
type denials[S any] struct {
	slots atomic.Pointer[[]atomic.Pointer[denial[S]]]
}

// denial is a published copy of a record's state.
type denial[S any] struct {
	key   string
	scope unique.Handle[scope]
	ref   uint32               // the record's, to withdraw it
	st    S                    // an O(1) algorithm's state
	log   *algorithm.LogDenial // a log's
}

// ways is the slots from its home a key's copy may be in.
const ways = 4

// find is the published denial of key under scope, whose tag is tag; nil
// when none is. It takes no lock: what it returns is not written again.
func (d *denials[S]) find(tag uint32, key string, sc unique.Handle[scope]) *denial[S] {
	p := d.slots.Load()
	if p == nil {
		return nil
	}
	slots := *p
	mask := uint32(len(slots) - 1)
	for i, j := tag&mask, 0; j < ways; i, j = (i+1)&mask, j+1 {
		e := slots[i].Load()
		if e == nil { // publish takes the first free slot: a key seen past one is published again
			return nil
		}
		if e.key == key && e.scope == sc {
			return e
		}
	}
	return nil
}

// publish copies r's state (ref's, in t) for readers without the lock,
// when it is marked used, has no copy yet and one of its slots is free,
// after the denial of a Take of n at now under rate; the caller holds the
// lock. A log's copy is published only if it decides that denial itself:
// one it would decline (a retry past the entries it holds) would be
// withdrawn by the next such Take, a copy made per request of a cost the
// client chose.
func (t *table[S]) publish(ref uint32, r *record[S], now int64, rate *algorithm.Rate, n int64) {
	if !r.used || r.published {
		return
	}
	var snap algorithm.LogDenial
	l, isLog := any(&r.st).(*algorithm.Log)
	if isLog {
		var out algorithm.Outcome
		if snap = l.Denial(); !snap.DeniesTo(now, rate, n, &out) {
			return
		}
	}
	p := t.den.slots.Load()
	if p == nil || len(*p) < 2*len(t.ix.slots) { // grown with the index, the copies moved over
		slots := make([]atomic.Pointer[denial[S]], max(ways, 2*len(t.ix.slots)))
		if p != nil {
			for i := range *p {
				if e := (*p)[i].Load(); e != nil {
					if j, ok := free(slots, t.at(e.ref).tag); ok {
						slots[j].Store(e)
					} else {
						t.at(e.ref).published = false
					}
				}
			}
		}
		p = &slots
		t.den.slots.Store(p)
	}
	if i, ok := free(*p, r.tag); ok {
		var e *denial[S]
		if isLog { // one allocation for both
			both := &struct {
				d    denial[S]
				snap algorithm.LogDenial
			}{denial[S]{key: r.key, scope: r.scope, ref: ref}, snap} // st, the live log, is not copied
			both.d.log = &both.snap
			e = &both.d
		} else {
			e = &denial[S]{key: r.key, scope: r.scope, ref: ref, st: r.st}
		}
		(*p)[i].Store(e)
		r.published = true
	}
}

// free is a free slot of tag's ways, if there is one.
func free[S any](slots []atomic.Pointer[denial[S]], tag uint32) (uint32, bool) {
	mask := uint32(len(slots) - 1)
	for i, j := tag&mask, 0; j < ways; i, j = (i+1)&mask, j+1 {
		if slots[i].Load() == nil {
			return i, true
		}
	}
	return 0, false
}

// publishes records that a table of sh published a denial; the caller
// holds the lock.
func (sh *shard) publishes() {
	if !sh.denying.Load() {
		sh.denying.Store(true)
	}
}

// withdraw takes back r's published state; the caller holds the lock.
func (t *table[S]) withdraw(ref uint32, r *record[S]) {
	r.published = false
	slots := *t.den.slots.Load()
	mask := uint32(len(slots) - 1)
	for i, j := r.tag&mask, 0; j < ways; i, j = (i+1)&mask, j+1 {
		if e := slots[i].Load(); e != nil && e.ref == ref {
			slots[i].Store(nil)
			return
		}
	}
}

// denied decides a Take of req at *now (0: the store's clock, read into it
// only when a copy is found), without the lock of sh, its shard, when the
// key's table published a denial that still denies it: it reports whether
// it did, and out holds the outcome if so. Each algorithm is written out,
// as in takeHeld.
func (s *Store) denied(sh *shard, req *backend.Request, rd *ruled, h uint64, now *int64, out *algorithm.Outcome) bool {
	tag := tagOf(h)
	switch req.Rule.Algorithm() {
	case backend.GCRA:
		if d := sh.gcra.den.find(tag, req.Key, rd.scope); d != nil {
			return d.st.DeniesTo(s.at(now), &rd.rate, req.Cost, out)
		}
	case backend.FixedWindow:
		if d := sh.fixed.den.find(tag, req.Key, rd.scope); d != nil {
			return d.st.DeniesTo(s.at(now), &rd.rate, req.Cost, out)
		}
	case backend.SlidingWindowCounter:
		if d := sh.counter.den.find(tag, req.Key, rd.scope); d != nil {
			return d.st.DeniesTo(s.at(now), &rd.rate, req.Cost, out)
		}
	case backend.SlidingWindow:
		if d := sh.log.den.find(tag, req.Key, rd.scope); d != nil {
			return d.log.DeniesTo(s.at(now), &rd.rate, req.Cost, out)
		}
	}
	return false
}

// deniedGuarded is denied on a clock given WithStoreClock, which is the
// caller's code: its panic comes back as an error.
func (s *Store) deniedGuarded(sh *shard, req *backend.Request, rd *ruled, h uint64, out *algorithm.Outcome) (ok bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			ok, err = false, panicked(r)
		}
	}()
	var now int64
	return s.denied(sh, req, rd, h, &now, out), nil
}

// at is *now, which it reads from the store's clock first when it is 0.
func (s *Store) at(now *int64) int64 {
	if *now == 0 {
		*now = s.micros()
	}
	return *now
}

// allDenied decides reqs, a TakeAll on the store's default clock, without
// any lock when each request has a published denial that still denies it:
// nothing is recorded, and each outcome is what its Peek would say, as
// under the locks (see TakeAll). It reads the clock once, at the first
// copy, and reports false at the first request that has none, or that its
// copy admits: the caller then takes the locks, and writes every outcome.
func (s *Store) allDenied(reqs []backend.Request, rds []*ruled, hashes []uint64, outs []backend.Outcome) bool {
	var now int64
	for i := range reqs {
		sh := &s.shards[hashes[i]&s.mask]
		if reqs[i].Now != 0 || rds[i].block != 0 || !sh.denying.Load() || !s.denied(sh, &reqs[i], rds[i], hashes[i], &now, &outs[i]) {
			return false
		}
	}
	return true
}
