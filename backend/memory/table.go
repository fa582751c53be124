package memory

import (
	"unique"
)

// table holds a shard's keys under one algorithm, whose state S (one of
// package algorithm's types) each record holds inline: the records sit in
// chunks of a slab, found by an index on the hash, and referred to by
// number (ref, from 1), not by pointer, so that a key costs its record and
// an index slot, and no allocation of its own once the slab has grown.
//
// Two lists order a table's keys for eviction, so that a flood of keys used
// once (random tokens, spoofed addresses) cannot evict a key in active use
// and give it a fresh quota:
//
//   - probation: keys that arrived and were not used again since, newest
//     first;
//   - protected: keys used again after they arrived, in the order of a
//     CLOCK: a use sets the key's used bit (in the record the decision
//     writes anyway) rather than moving it to the front, which would write
//     two neighbours' records on every decision.
//
// The shard picks which key makes room for a new one (see shard.victim).
//
// The index and the lists are written here rather than taken from
// github.com/hashicorp/golang-lru/v2 (which the store used before): its LRU
// keeps a map of its own keyed by the key's string, which hashed every key a
// second time, and a list element allocated beside each entry.
type table[S any] struct {
	ix                   index
	chunks               []*[chunkLen]record[S]
	made                 uint32 // records handed out from the chunks: refs 1 to made
	free                 uint32 // a removed record, whose next is the next free one; 0: none
	probation, protected list
	den                  denials[S] // the keys being denied, for readers without the lock
}

// chunkLen is the records of a chunk: the slab grows by a chunk, a few KB.
const chunkLen = 16

// record is one key's state under one scope.
type record[S any] struct {
	key   string
	scope unique.Handle[scope]
	// expireAt is when the state may be dropped, on the store's clock (µs):
	// its life (at least the rule's retention) after its last write, as a
	// server's TTL counts. One clock decides what may be dropped, whatever
	// clock the requests are decided on.
	expireAt   int64
	prev, next uint32 // in its list; next: in the free list when removed
	tag        uint32 // in the index
	protected  bool   // used again after it arrived
	used       bool   // protected, and used since the sweep last passed it
	published  bool   // its state is in the table's denials
	st         S
}

// list is a doubly linked list of records by ref; 0 ends it.
type list struct{ newest, oldest uint32 }

func (t *table[S]) at(ref uint32) *record[S] {
	return &t.chunks[(ref-1)/chunkLen][(ref-1)%chunkLen]
}

// find is the record of key under scope, whose hash is h, and its ref; nil
// when the table holds none.
func (t *table[S]) find(h uint64, key string, scope unique.Handle[scope]) (uint32, *record[S]) {
	slots := t.ix.slots
	if len(slots) == 0 {
		return 0, nil
	}
	tag, mask := tagOf(h), uint32(len(slots)-1)
	for i := tag & mask; slots[i].ref != 0; i = (i + 1) & mask {
		if slots[i].tag == tag {
			if r := t.at(slots[i].ref); r.key == key && r.scope == scope {
				return slots[i].ref, r
			}
		}
	}
	return 0, nil
}

// add makes a record for key under scope, on probation, with an empty
// state; the shard made room for it.
func (t *table[S]) add(h uint64, key string, scope unique.Handle[scope]) (uint32, *record[S]) {
	ref := t.free
	if ref != 0 {
		t.free = t.at(ref).next
	} else {
		if t.made%chunkLen == 0 {
			t.chunks = append(t.chunks, new([chunkLen]record[S]))
		}
		t.made++
		ref = t.made
	}
	r := t.at(ref)
	*r = record[S]{key: key, scope: scope, tag: tagOf(h)}
	t.ix.add(r.tag, ref)
	t.push(&t.probation, ref)
	return ref, r
}

// remove drops the record ref, which holds nothing afterwards.
func (t *table[S]) remove(ref uint32) {
	r := t.at(ref)
	if r.published {
		t.withdraw(ref, r)
	}
	t.ix.remove(r.tag, ref)
	t.unlink(ref)
	*r = record[S]{next: t.free}
	t.free = ref
}

// drop removes ref and says how many log entries it held.
func (t *table[S]) drop(ref uint32) int {
	n := held(&t.at(ref).st)
	t.remove(ref)
	return n
}

// used records a use of ref, whose state the caller may write: its
// published denial, if any, is withdrawn (see seen). A record already
// marked used (so protected) with no copy out is left as it is, with no
// call: that is a held key's common use.
func (t *table[S]) used(ref uint32, r *record[S]) {
	if r.used && !r.published {
		return
	}
	t.use(ref, r)
}

// use is used past its common case.
func (t *table[S]) use(ref uint32, r *record[S]) {
	if r.published {
		t.withdraw(ref, r)
	}
	t.seen(ref, r)
}

// seen records a use of ref that writes nothing to its state (a peek): a
// protected key's bit is set, a key on probation is protected from now on.
func (t *table[S]) seen(ref uint32, r *record[S]) {
	if r.protected {
		if !r.used { // a denial writes nothing else: the record's line stays clean
			r.used = true
		}
		return
	}
	t.unlink(ref)
	r.protected = true
	t.push(&t.protected, ref)
}

func (t *table[S]) len() int { return t.ix.n }

// push puts ref at the front of l.
func (t *table[S]) push(l *list, ref uint32) {
	r := t.at(ref)
	r.prev, r.next = 0, l.newest
	if l.newest != 0 {
		t.at(l.newest).prev = ref
	} else {
		l.oldest = ref
	}
	l.newest = ref
}

// unlink takes ref out of its list.
func (t *table[S]) unlink(ref uint32) {
	r := t.at(ref)
	l := &t.probation
	if r.protected {
		l = &t.protected
	}
	if r.prev != 0 {
		t.at(r.prev).next = r.next
	} else {
		l.newest = r.next
	}
	if r.next != 0 {
		t.at(r.next).prev = r.prev
	} else {
		l.oldest = r.prev
	}
	r.prev, r.next = 0, 0
}

// victim is this table's candidate to make room at now in class c, or 0.
func (t *table[S]) victim(now int64, c class) uint32 {
	switch c {
	case idleProbation:
		if o := t.probation.oldest; o != 0 && t.at(o).expireAt <= now {
			return o
		}
	case idleProtected:
		if o := t.protected.oldest; o != 0 && t.at(o).expireAt <= now {
			return o
		}
	case onProbation:
		return t.probation.oldest
	case sweep: // from the oldest, each used key once to the front
		for i := t.ix.n; i > 0; i-- {
			o := t.protected.oldest
			r := t.at(o)
			if !r.used {
				return o
			}
			r.used = false
			if r.published { // only a key marked used is denied without the lock
				t.withdraw(o, r)
			}
			t.unlink(o)
			t.push(&t.protected, o)
		}
		return t.protected.oldest
	}
	return 0
}

// oldest calls f on the keys from the least recently used (probation, then
// protected) until f returns false; f may remove the key it is given.
func (t *table[S]) oldest(f func(ref uint32, expireAt int64) bool) {
	for _, l := range []*list{&t.probation, &t.protected} {
		for ref := l.oldest; ref != 0; {
			r := t.at(ref)
			prev := r.prev
			if !f(ref, r.expireAt) {
				return
			}
			ref = prev
		}
	}
}
