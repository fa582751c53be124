package memory

import (
	"github.com/ratelimit-go/ratelimit/algorithm"
	"github.com/ratelimit-go/ratelimit/backend"
)

// entry is the state of one key under one prefix and algorithm: a key used
// under two algorithms is two entries, each holding only its algorithm's
// state. It is also its table's index entry and list element.
type entry struct {
	key, prefix string
	hash        uint64 // of the key, prefix and algorithm (see Store.hash)
	st          state
	// expireAt is when the state may be dropped, on the store's clock (µs):
	// its life (at least the rule's retention) after its last write, as a
	// server's TTL counts. One clock decides what may be dropped, whatever
	// clock the requests are decided on.
	expireAt   int64
	prev, next *entry // in the table's list
	collide    *entry // the next entry of the same hash
	alg        backend.Algorithm
	protected  bool // used again after it arrived (see table)
	used       bool // protected, and used since the sweep passed it
}

// state is a key's state under one algorithm: algorithm's types, which
// decide by the rules package algorithm states.
type state interface {
	Take(now int64, r algorithm.Rate, n int64) algorithm.Outcome
	Peek(now int64, r algorithm.Rate, n int64) algorithm.Outcome
	Refund(now int64, r algorithm.Rate, n int64) (algorithm.Outcome, bool)
	Empty() bool
}

// newEntry is an entry with an empty state under alg, in one allocation
// with it (the state is the next cache line, not another object), or nil
// for an algorithm the store does not know.
func newEntry(alg backend.Algorithm) *entry {
	switch alg {
	case backend.SlidingWindow:
		return entryWith[algorithm.Log]()
	case backend.FixedWindow:
		return entryWith[algorithm.Fixed]()
	case backend.SlidingWindowCounter:
		return entryWith[algorithm.SlidingCounter]()
	case backend.GCRA:
		return entryWith[algorithm.Bucket]()
	}
	return nil
}

// entryWith is an entry allocated together with an empty S, its state.
func entryWith[S any, P interface {
	*S
	state
}]() *entry {
	x := &struct {
		entry
		s S
	}{}
	x.st = P(&x.s)
	return &x.entry
}

// empty is one empty state per algorithm, for peeks at keys not held: a peek
// writes nothing, so they stay empty.
var empty = [...]state{&algorithm.Log{}, &algorithm.Fixed{}, &algorithm.SlidingCounter{}, &algorithm.Bucket{}}

// idle reports whether the state has expired at now (the store's clock).
func (e *entry) idle(now int64) bool { return e.expireAt <= now }

// entries is the number of log entries the key holds (0 but for a sliding
// log).
func (e *entry) entries() int {
	if l, ok := e.st.(*algorithm.Log); ok {
		return l.Len()
	}
	return 0
}

// wrote extends the state's expiry after a write at storeNow that says it
// counts for life more (see algorithm.Outcome), keeping it at least the
// rule's retention.
func (e *entry) wrote(storeNow, life, retain int64) {
	if life > 0 {
		e.expireAt = max(e.expireAt, storeNow+max(life, retain))
	}
}
