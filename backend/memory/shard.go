package memory

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ratelimit-go/ratelimit/algorithm"
	"github.com/ratelimit-go/ratelimit/backend"
)

// shard is a lock and the keys it guards: a table per algorithm, which
// share the shard's bound on keys.
type shard struct {
	mu sync.Mutex
	// denying: a table published a denial once (see denials); until then
	// a Take goes straight to the lock.
	denying    atomic.Bool
	log        table[algorithm.Log]
	fixed      table[algorithm.Fixed]
	counter    table[algorithm.SlidingCounter]
	gcra       table[algorithm.Bucket]
	leases     table[algorithm.Leases] // InFlight's permits
	blocks     table[blocked]          // the penalty boxes (backend.Rule.Block)
	capacity   int                     // keys, in all tables
	entries    int                     // log entries held
	maxEntries int
	refuse     bool   // WhenFull is RefuseNewKeys
	stats      *stats // the store's
	_          [64]byte
}

// keys is what the shard asks of each of its tables, whatever their state
// (the cold paths: eviction, sweeps).
type keys interface {
	len() int
	victim(now int64, c class) uint32
	oldest(f func(ref uint32, expireAt int64) bool)
	drop(ref uint32) (entries int)
}

func (sh *shard) tables() [6]keys {
	return [...]keys{&sh.log, &sh.fixed, &sh.counter, &sh.gcra, &sh.leases, &sh.blocks}
}

// op is what a decision does.
type op uint8

const (
	peek op = iota
	take
	refund // req.Admitted: an undo
	charge
)

// decide does o for req at now on the shard, whose lock is held, writing
// its outcome to out; h is the hash of req's state, storeNow the store's
// clock, which expiry is kept on.
func (sh *shard) decide(req *backend.Request, rd *ruled, h uint64, now, storeNow int64, o op, out *algorithm.Outcome) error {
	if rd.block > 0 && o != take { // a take: through take
		return sh.boxed(req, rd, h, now, storeNow, o, out)
	}
	return sh.decideUnboxed(req, rd, h, now, storeNow, o, out)
}

// decideUnboxed is decide, but for a penalty box.
func (sh *shard) decideUnboxed(req *backend.Request, rd *ruled, h uint64, now, storeNow int64, o op, out *algorithm.Outcome) error {
	switch o {
	case take:
		return sh.take(req, rd, h, now, storeNow, out)
	case charge:
		return sh.charge(req, rd, h, now, storeNow, out)
	}
	switch req.Rule.Algorithm() {
	case backend.GCRA:
		return decideIn(sh, &sh.gcra, req, rd, h, now, storeNow, o, out)
	case backend.FixedWindow:
		return decideIn(sh, &sh.fixed, req, rd, h, now, storeNow, o, out)
	case backend.SlidingWindowCounter:
		return decideIn(sh, &sh.counter, req, rd, h, now, storeNow, o, out)
	case backend.SlidingWindow:
		return decideIn(sh, &sh.log, req, rd, h, now, storeNow, o, out)
	case backend.InFlight:
		if o == peek { // the permits held; any other operation is Acquire's or Release's
			if _, r := sh.leases.find(h, req.Key, rd.scope); r != nil {
				*out = r.st.Peek(now, rd.rate, req.Cost)
			} else {
				*out = (&algorithm.Leases{}).Peek(now, rd.rate, req.Cost)
			}
			return nil
		}
	}
	return backend.Unsupported("ratelimit/memory", req.Rule.Algorithm())
}

// permit acquires (or renews) permit id of req's key, or releases it.
func (sh *shard) permit(req *backend.Request, rd *ruled, h uint64, now, storeNow int64, id int64, acquire bool, out *algorithm.Outcome) error {
	var e algorithm.Effect
	if acquire {
		_, r, err := enter(sh, &sh.leases, req, rd, h, storeNow)
		if err != nil {
			return err
		}
		*out, e = r.st.Acquire(now, rd.rate, id)
		r.wrote(storeNow, e.Life, req.Rule.Retain(), req.Now)
		return nil
	}
	ref, r := sh.leases.find(h, req.Key, rd.scope)
	if r == nil { // nothing held: nothing to release
		*out = (&algorithm.Leases{}).Peek(now, rd.rate, 1)
		return nil
	}
	sh.leases.used(ref, r)
	*out, e = r.st.Release(now, rd.rate, id)
	r.wrote(storeNow, e.Life, req.Rule.Retain(), req.Now)
	return nil
}

// takeHeld decides a Take of a key the shard holds, on the record's
// concrete state (a sliding log's when the shard has room for one more
// entry), and reports whether it did: false changes nothing (see
// Store.Take).
func (sh *shard) takeHeld(req *backend.Request, rd *ruled, h uint64, now, storeNow int64, out *algorithm.Outcome) bool {
	// The cases are written out: a generic helper calls TakeTo
	// through its dictionary or a func value, and escape analysis then
	// moves the caller's out to the heap (an allocation per decision).
	// A denial is published only on the store's clock: only a Take on
	// it reads the copies (see denied).
	rule := req.Rule
	switch rule.Algorithm() {
	case backend.GCRA:
		if ref, r := sh.gcra.find(h, req.Key, rd.scope); r != nil {
			sh.gcra.used(ref, r)
			e := r.st.TakeTo(now, &rd.rate, req.Cost, out)
			r.wrote(storeNow, e.Life, rule.Retain(), req.Now)
			if out.RetryAfter != 0 && !e.Changed && req.Now == 0 {
				sh.gcra.publish(ref, r, now, &rd.rate, req.Cost)
				sh.publishes()
			}
			return true
		}
	case backend.FixedWindow:
		if ref, r := sh.fixed.find(h, req.Key, rd.scope); r != nil {
			sh.fixed.used(ref, r)
			e := r.st.TakeTo(now, &rd.rate, req.Cost, out)
			r.wrote(storeNow, e.Life, rule.Retain(), req.Now)
			if out.RetryAfter != 0 && !e.Changed && req.Now == 0 {
				sh.fixed.publish(ref, r, now, &rd.rate, req.Cost)
				sh.publishes()
			}
			return true
		}
	case backend.SlidingWindowCounter:
		if ref, r := sh.counter.find(h, req.Key, rd.scope); r != nil {
			sh.counter.used(ref, r)
			e := r.st.TakeTo(now, &rd.rate, req.Cost, out)
			r.wrote(storeNow, e.Life, rule.Retain(), req.Now)
			if out.RetryAfter != 0 && !e.Changed && req.Now == 0 {
				sh.counter.publish(ref, r, now, &rd.rate, req.Cost)
				sh.publishes()
			}
			return true
		}
	case backend.SlidingWindow:
		// A Take adds one entry at most: with room for it, the shard
		// sheds nothing (takeIn's case otherwise). What a log's denial
		// publishes is copied from the log as the Take left it, pruned
		// or not (see denials).
		if ref, r := sh.log.find(h, req.Key, rd.scope); r != nil && sh.entries < sh.maxEntries {
			sh.log.used(ref, r)
			before := r.st.Len()
			e := r.st.TakeTo(now, &rd.rate, req.Cost, out)
			r.wrote(storeNow, e.Life, rule.Retain(), req.Now)
			sh.entries += r.st.Len() - before
			if out.RetryAfter != 0 && req.Now == 0 {
				sh.log.publish(ref, r, now, &rd.rate, req.Cost)
				sh.publishes()
			}
			return true
		}
	}
	return false
}

// take is decide's take.
func (sh *shard) take(req *backend.Request, rd *ruled, h uint64, now, storeNow int64, out *algorithm.Outcome) error {
	if rd.block > 0 {
		return sh.boxed(req, rd, h, now, storeNow, take, out)
	}
	return sh.takeIn(req, rd, h, now, storeNow, out)
}

// takeIn is take, but for a penalty box.
func (sh *shard) takeIn(req *backend.Request, rd *ruled, h uint64, now, storeNow int64, out *algorithm.Outcome) error {
	switch req.Rule.Algorithm() {
	case backend.GCRA:
		return takeIn(sh, &sh.gcra, req, rd, h, now, storeNow, out)
	case backend.FixedWindow:
		return takeIn(sh, &sh.fixed, req, rd, h, now, storeNow, out)
	case backend.SlidingWindowCounter:
		return takeIn(sh, &sh.counter, req, rd, h, now, storeNow, out)
	case backend.SlidingWindow:
		return takeIn(sh, &sh.log, req, rd, h, now, storeNow, out)
	}
	return backend.Unsupported("ratelimit/memory", req.Rule.Algorithm())
}

// charge is decide's charge.
func (sh *shard) charge(req *backend.Request, rd *ruled, h uint64, now, storeNow int64, out *algorithm.Outcome) error {
	switch req.Rule.Algorithm() {
	case backend.GCRA:
		return chargeIn(sh, &sh.gcra, req, rd, h, now, storeNow, out)
	case backend.FixedWindow:
		return chargeIn(sh, &sh.fixed, req, rd, h, now, storeNow, out)
	case backend.SlidingWindowCounter:
		return chargeIn(sh, &sh.counter, req, rd, h, now, storeNow, out)
	case backend.SlidingWindow:
		return chargeIn(sh, &sh.log, req, rd, h, now, storeNow, out)
	}
	return backend.Unsupported("ratelimit/memory", req.Rule.Algorithm())
}

// decideIn is decide's peek or refund on t, the table of req's algorithm.
func decideIn[S any, P stateOf[S]](sh *shard, t *table[S], req *backend.Request, rd *ruled, h uint64, now, storeNow int64, o op, out *algorithm.Outcome) error {
	rule := req.Rule
	ref, r := t.find(h, req.Key, rd.scope)
	if r == nil {
		switch {
		case o == peek: // nothing stored: nothing to write
			*out = empty[rule.Algorithm()].Peek(now, rule.Rate(), req.Cost)
		case req.Admitted != 0: // nothing to undo
			*out = empty[rule.Algorithm()].Peek(now, rule.Rate(), 1)
		default:
			return overRefund(req, 0)
		}
		return nil
	}
	st := P(&r.st)
	if o == peek { // what was published stays: a peek writes nothing
		t.seen(ref, r)
		*out = st.Peek(now, rule.Rate(), req.Cost)
		if out.RetryAfter != 0 && rd.block == 0 && req.Now == 0 { // as a Take's denial: TakeAll peeks first
			t.publish(ref, r, now, &rd.rate, req.Cost)
			sh.publishes()
		}
		return nil
	}
	t.used(ref, r)
	before := held(&r.st)
	var e algorithm.Effect
	if req.Admitted != 0 {
		*out, e = st.Undo(now, req.Admitted, rule.Rate(), req.Cost)
	} else {
		refunded, eff, ok := st.Refund(now, rule.Rate(), req.Cost)
		if !ok {
			return overRefund(req, st.Peek(now, rule.Rate(), 1).Count)
		}
		*out, e = refunded, eff
	}
	r.wrote(storeNow, e.Life, rule.Retain(), req.Now)
	sh.entries += held(&r.st) - before
	return nil
}

// takeIn is a Take on t, the table of req's algorithm, for any algorithm
// (the store's Take decides the O(1) ones on their records directly).
func takeIn[S any](sh *shard, t *table[S], req *backend.Request, rd *ruled, h uint64, now, storeNow int64, out *algorithm.Outcome) error {
	ref, r, err := enter(sh, t, req, rd, h, storeNow)
	if err != nil {
		return err
	}
	before := held(&r.st)
	e := takeTo(&r.st, now, &rd.rate, req.Cost, out)
	r.wrote(storeNow, e.Life, req.Rule.Retain(), req.Now)
	if out.RetryAfter != 0 && !e.Changed && rd.block == 0 && req.Now == 0 {
		t.publish(ref, r, now, &rd.rate, req.Cost)
		sh.publishes()
	}
	if grown := held(&r.st) - before; grown != 0 { // a Take prunes, admitted or not
		sh.entries += grown
		if grown > 0 && sh.entries > sh.maxEntries {
			sh.shed(ref, storeNow)
		}
	}
	return nil
}

// chargeIn is a Charge on t, the table of req's algorithm: as takeIn, but
// recorded whatever the quota left.
func chargeIn[S any, P stateOf[S]](sh *shard, t *table[S], req *backend.Request, rd *ruled, h uint64, now, storeNow int64, out *algorithm.Outcome) error {
	ref, r, err := enter(sh, t, req, rd, h, storeNow)
	if err != nil {
		return err
	}
	before := held(&r.st)
	var e algorithm.Effect
	*out, e = P(&r.st).Charge(now, req.Rule.Rate(), req.Cost)
	r.wrote(storeNow, e.Life, req.Rule.Retain(), req.Now)
	if grown := held(&r.st) - before; grown != 0 {
		sh.entries += grown
		if grown > 0 && sh.entries > sh.maxEntries {
			sh.shed(ref, storeNow)
		}
	}
	return nil
}

// enter is the record of req's key in t, its table, and its ref: a key held
// before is used again; a new one, for which the shard makes room, waits on
// probation (see table).
func enter[S any](sh *shard, t *table[S], req *backend.Request, rd *ruled, h uint64, storeNow int64) (uint32, *record[S], error) {
	ref, r := t.find(h, req.Key, rd.scope)
	if r != nil {
		t.used(ref, r)
		return ref, r, nil
	}
	if err := sh.makeRoom(storeNow); err != nil {
		return 0, nil, err
	}
	ref, r = t.add(h, req.Key, rd.scope)
	return ref, r, nil
}

// overRefund is the error of a refund of more than the held quota.
func overRefund(req *backend.Request, held int64) error {
	return fmt.Errorf("ratelimit/memory: %w: a refund of %d, and %q holds %d", backend.ErrInvalidCost, req.Cost, req.Key, held)
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

// keyCount is the keys the shard holds, in all tables.
func (sh *shard) keyCount() int {
	return sh.log.len() + sh.fixed.len() + sh.counter.len() + sh.gcra.len()
}

func (sh *shard) len() int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.keyCount()
}
