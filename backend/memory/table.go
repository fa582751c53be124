package memory

import "github.com/hashicorp/golang-lru/v2/simplelru"

// table holds a shard's keys, at most capacity, in two segments, so that a
// flood of keys used once (random tokens, spoofed addresses) cannot evict a
// key in active use and give it a fresh quota:
//
//   - probation: keys that arrived and were not used again since, the
//     oldest first out;
//   - protected: keys used again after they arrived; a use sets the key's
//     used bit, and the eviction sweep (CLOCK) gives a used key a second
//     chance at the front instead of moving it on every use, which would
//     write to its neighbours under load.
//
// A new key needs room: an idle key (its windows all passed) goes first, then
// the oldest key on probation, and only when none is on probation a
// protected key, by the sweep. A key in active use, decided more than once,
// is therefore never evicted for new keys while the shard holds keys used
// once.
type table struct {
	probation *simplelru.LRU[string, *entry]
	protected *simplelru.LRU[string, *entry]
	capacity  int
}

func newTable(capacity int) table {
	// Each segment may hold the whole capacity; the table keeps their sum
	// within it, so neither evicts by itself.
	probation, err := simplelru.NewLRU[string, *entry](capacity, nil)
	if err != nil {
		panic(err) // only for a capacity under 1, which New refuses
	}
	protected, _ := simplelru.NewLRU[string, *entry](capacity, nil)
	return table{probation: probation, protected: protected, capacity: capacity}
}

// get is key's entry, wherever it is.
func (t *table) get(key string) (*entry, bool) {
	if e, ok := t.protected.Peek(key); ok {
		return e, true
	}
	return t.probation.Peek(key)
}

// used records a use of key, already held: a protected key's bit is set, a
// key on probation is protected from now on.
func (t *table) used(key string, e *entry) {
	if e.protected {
		e.used = true
		return
	}
	t.probation.Remove(key)
	e.protected = true
	t.protected.Add(key, e)
}

// len is the number of keys held.
func (t *table) len() int { return t.probation.Len() + t.protected.Len() }

// full reports whether a new key needs room.
func (t *table) full() bool { return t.len() >= t.capacity }

// add puts a new key on probation; the caller made room.
func (t *table) add(key string, e *entry) { t.probation.Add(key, e) }

// remove drops key, held as e.
func (t *table) remove(key string, e *entry) {
	if e.protected {
		t.protected.Remove(key)
	} else {
		t.probation.Remove(key)
	}
}

// victim is the key that makes room for a new one (see table), or false
// when the table is empty.
func (t *table) victim(now int64) (string, *entry, bool) {
	pk, pe, onProbation := t.probation.GetOldest()
	if onProbation && pe.idle(now) {
		return pk, pe, true
	}
	if k, e, ok := t.protected.GetOldest(); ok && e.idle(now) {
		return k, e, true
	}
	if onProbation {
		return pk, pe, true
	}
	for i := t.protected.Len(); i > 0; i-- { // the sweep: each used key once to the front
		k, e, _ := t.protected.GetOldest()
		if !e.used || e.idle(now) {
			return k, e, true
		}
		e.used = false
		t.protected.Get(k) // to the front
	}
	return t.protected.GetOldest()
}

// oldest calls f on the keys from the least recently used (probation, then
// protected) until f returns false.
func (t *table) oldest(f func(key string, e *entry) bool) {
	for _, k := range t.probation.Keys() {
		if e, ok := t.probation.Peek(k); ok && !f(k, e) {
			return
		}
	}
	for _, k := range t.protected.Keys() {
		if e, ok := t.protected.Peek(k); ok && !f(k, e) {
			return
		}
	}
}
