// Package owner keeps what this module's stores derive from a rule (a
// script's arguments, a prefix's hash, a fallback's share) with the rule,
// so that each is made once per rule rather than once per decision. Its
// Key is internal, so that backend.Rule.Own, which takes one, is no API a
// store outside this module can come to depend on.
package owner

import "sync/atomic"

// Key names one owner's values: a store, or a layer. Keys compare by
// pointer; make them with New.
type Key struct{ _ byte } // not zero-sized: every Key has its own address

// New returns a key of its own.
func New() *Key { return new(Key) }

// max bounds the values a rule keeps: a Limiter's store and the layers over
// it (a guard, its fallback, a near cache) are a few. One more owner has
// the values of the others made again.
const max = 8

// Values are the values of a few owners. The zero value is empty and ready;
// it is safe for concurrent use and must not be copied after first use.
type Values struct {
	p atomic.Pointer[list]
}

type list struct {
	n int
	e [max]entry
}

type entry struct {
	k *Key
	v any
}

// First is k's value if k is the first owner: one comparison, inlined
// where it is called (the common rule has one owner, its store). Get finds
// the others.
func (vs *Values) First(k *Key) (any, bool) {
	if l := vs.p.Load(); l != nil && l.e[0].k == k { // never nil: Put keeps no nil key
		return l.e[0].v, true
	}
	return nil, false
}

// Get is k's value, if it has one.
func (vs *Values) Get(k *Key) (any, bool) {
	if l := vs.p.Load(); l != nil && k != nil {
		for _, e := range l.e[:l.n] {
			if e.k == k {
				return e.v, true
			}
		}
	}
	return nil, false
}

// Put keeps v as k's value and returns k's value: v, or the value another
// caller put first. A nil key keeps nothing.
func (vs *Values) Put(k *Key, v any) any {
	if k == nil {
		return v
	}
	for {
		old := vs.p.Load()
		next := &list{n: 1}
		next.e[0] = entry{k, v}
		if old != nil {
			for _, e := range old.e[:old.n] {
				if e.k == k {
					return e.v
				}
			}
			next.n += copy(next.e[1:], old.e[:old.n])
		}
		if vs.p.CompareAndSwap(old, next) {
			return v
		}
	}
}
