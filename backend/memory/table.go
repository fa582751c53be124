package memory

import "github.com/ratelimit-go/ratelimit/backend"

// table holds a shard's keys, at most capacity: an index by hash, and two
// lists that order the keys for eviction, so that a flood of keys used once
// (random tokens, spoofed addresses) cannot evict a key in active use and
// give it a fresh quota:
//
//   - probation: keys that arrived and were not used again since, newest
//     first;
//   - protected: keys used again after they arrived, in the order of a
//     CLOCK: a use sets the key's used bit (a write to the entry the
//     decision touches anyway) rather than moving it to the front, which
//     would write to two neighbours' cache lines on every decision, under
//     the shard's lock.
//
// A new key needs room: an idle key (its windows all passed) at the end of
// either list goes first, then the oldest key on probation, and only when
// none is on probation a protected key, by the sweep: from the oldest, a
// key used since the sweep last passed it goes to the front with its bit
// cleared, and the first one not used is evicted. A key used since the
// sweep last passed is never evicted before one that was not; a key used
// once, however recently, goes before any key used twice. A key in active
// use is therefore never evicted for new keys while the shard holds keys
// used once.
//
// The index and the lists are written here rather than taken from
// github.com/hashicorp/golang-lru/v2 (which the store used before): its LRU
// keeps a map of its own, keyed by the key's string, which hashed every key
// a second time after the shard's hash, and allocated a list element beside
// each entry. Here the shard's hash is the index's key and the entry is the
// list element: one hash and one allocation per key (the benchmarks in
// bench/peers measure the store against sethvargo/go-limiter).
type table struct {
	index                map[uint64]*entry // by hash; entries whose hashes collide are chained
	probation, protected list
	n, capacity          int
}

// list is a doubly linked list of entries through their prev and next,
// around a sentinel.
type list struct{ root entry }

func (l *list) init()          { l.root.prev, l.root.next = &l.root, &l.root }
func (l *list) empty() bool    { return l.root.next == &l.root }
func (l *list) oldest() *entry { return l.root.prev }

func (l *list) pushFront(e *entry) {
	e.prev, e.next = &l.root, l.root.next
	e.next.prev, l.root.next = e, e
}

func unlink(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func newTable(capacity int) *table {
	t := &table{index: make(map[uint64]*entry), capacity: capacity}
	t.probation.init()
	t.protected.init()
	return t
}

// get is the entry of key under prefix and alg, whose hash is h, or nil.
func (t *table) get(h uint64, key, prefix string, alg backend.Algorithm) *entry {
	for e := t.index[h]; e != nil; e = e.collide {
		if e.key == key && e.alg == alg && e.prefix == prefix {
			return e
		}
	}
	return nil
}

// used records a use of e, held: a protected key's bit is set, a key on
// probation is protected from now on.
func (t *table) used(e *entry) {
	if e.protected {
		e.used = true
		return
	}
	unlink(e)
	e.protected = true
	t.protected.pushFront(e)
}

// full reports whether a new key needs room.
func (t *table) full() bool { return t.n >= t.capacity }

// add puts a new key on probation; the caller made room.
func (t *table) add(e *entry) {
	e.collide = t.index[e.hash]
	t.index[e.hash] = e
	t.probation.pushFront(e)
	t.n++
}

// remove drops e.
func (t *table) remove(e *entry) {
	unlink(e)
	t.n--
	first := t.index[e.hash]
	if first == e {
		if e.collide == nil {
			delete(t.index, e.hash)
		} else {
			t.index[e.hash] = e.collide
		}
		return
	}
	for p := first; p != nil; p = p.collide {
		if p.collide == e {
			p.collide = e.collide
			return
		}
	}
}

// victim is the key that makes room for a new one (see table), or nil when
// the table is empty.
func (t *table) victim(now int64) *entry {
	po, pr := t.probation.oldest(), t.protected.oldest()
	switch {
	case !t.probation.empty() && po.idle(now):
		return po
	case !t.protected.empty() && pr.idle(now):
		return pr
	case !t.probation.empty():
		return po
	}
	for i := t.n; i > 0; i-- { // the sweep: each used key once to the front
		e := t.protected.oldest()
		if !e.used {
			return e
		}
		e.used = false
		unlink(e)
		t.protected.pushFront(e)
	}
	if !t.protected.empty() {
		return t.protected.oldest()
	}
	return nil
}

// oldest calls f on the keys from the least recently used (probation, then
// protected) until f returns false; f may remove the key it is given.
func (t *table) oldest(f func(e *entry) bool) {
	for _, l := range []*list{&t.probation, &t.protected} {
		for e := l.oldest(); e != &l.root; {
			prev := e.prev
			if !f(e) {
				return
			}
			e = prev
		}
	}
}
