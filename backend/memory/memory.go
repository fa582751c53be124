// Package memory is the in-process backend.Store: no server, state lost on
// restart, shared only by the Limiters of one process. It is the default for
// a single-node app and for tests.
//
// Keys are spread over shards, each a mutex guarding a table of keys per
// algorithm, so decisions on different keys rarely contend. A key's state
// under each prefix and algorithm is a record of its own, holding that
// algorithm's state inline (package algorithm's types) in a slab, found by
// one hash of the key through an index of the store's own. A sliding log is
// a sorted slice of timestamps, pruned by binary search; a warm key decides
// without allocating. TakeAll decides any requests together, under the
// locks of their shards. A key being denied on the store's clock, the
// common case under abuse, is decided without any lock, on an immutable
// copy of its state (a log's: what its denials read) published by its last
// denial (see denials): a flood at one key costs no atomic write.
//
// The store is bounded twice: by keys (WithMaxKeys) and by the entries of
// sliding logs (WithMaxEntries), which hold one entry per admitted request
// in the window; the other algorithms hold O(1) state per key (about 100
// bytes with the index, beside the key's own bytes; a key being denied
// about 100 more, a log's 250: its copy and its slots). The worst case is
// therefore about MaxKeys*380 bytes plus MaxEntries*16 bytes: 38 MB plus
// 160 MB with the defaults, and the keys; an entry of cost 1 takes half (a
// log's buffer, grown by append when over three quarters full, holds up to
// 2.7 times its entries). A background sweeper drops keys whose state has
// expired (its life, or the Limiter's retention, has passed since its last
// write, on the store's clock), which loses nothing.
//
// When a shard is full, a new key takes the place of an expired key if
// there is one, else of the oldest key used only once (on probation), and
// only when every key was used again since it arrived, of a key not used
// since a CLOCK sweep last passed it (see shard.makeRoom). A flood of new
// keys therefore cannot evict a key in active use while the shard holds
// keys used once. A key evicted inside its window forgets its history
// (ActiveEvictions counts them); WithWhenFull(RefuseNewKeys) refuses the new
// key with ErrFull instead, so that the Limiter's failure mode decides. Size
// the bounds above what is active within one window.
package memory

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	"github.com/ratelimit-go/ratelimit/algorithm"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/keyhash"
)

// Store is the in-memory backend.Store. Create it with New and Close it when
// done to stop its sweeper.
type Store struct {
	shards []shard
	mask   uint64
	seed   keyhash.Seed
	// The store's clock: clock (WithStoreClock), or by default the wall
	// clock read at start, advanced by the monotonic clock (see micros).
	clock       func() time.Time
	start       time.Time
	startMicros int64

	stats      stats
	sweepEvery time.Duration
	stop       chan struct{}
	stopOnce   sync.Once
	swept      sync.WaitGroup
}

// Store is a whole store: every operation of the contract.
var _ backend.Store = (*Store)(nil)

// stats counts what the key bound did.
type stats struct {
	activeEvictions atomic.Uint64
	refused         atomic.Uint64
}

// New returns an empty Store. A bound under 1 (WithMaxKeys,
// WithMaxEntries, WithShards) or an unknown WhenFull is an error wrapping
// backend.ErrInvalidArgument.
func New(opts ...Option) (*Store, error) {
	c := config{maxKeys: DefaultMaxKeys, maxEntries: DefaultMaxEntries, shards: max(64, 16*runtime.GOMAXPROCS(0)), sweepEvery: DefaultSweepInterval}
	for _, o := range opts {
		o(&c)
	}
	switch {
	case c.maxKeys < 1:
		return nil, fmt.Errorf("ratelimit/memory: %w: WithMaxKeys(%d), want at least 1", backend.ErrInvalidArgument, c.maxKeys)
	case c.maxEntries < 1:
		return nil, fmt.Errorf("ratelimit/memory: %w: WithMaxEntries(%d), want at least 1", backend.ErrInvalidArgument, c.maxEntries)
	case c.shards < 1:
		return nil, fmt.Errorf("ratelimit/memory: %w: WithShards(%d), want at least 1", backend.ErrInvalidArgument, c.shards)
	case c.whenFull != EvictLeastRecent && c.whenFull != RefuseNewKeys:
		return nil, fmt.Errorf("ratelimit/memory: %w: WithWhenFull(%d), an unknown policy", backend.ErrInvalidArgument, c.whenFull)
	}
	start := time.Now()
	n := 1
	for n < c.shards && n*2 <= c.maxKeys { // every shard holds a key at least
		n <<= 1
	}
	s := &Store{shards: make([]shard, n), mask: uint64(n - 1), seed: keyhash.NewSeed(), clock: c.clock, start: start, startMicros: start.UnixMicro(), sweepEvery: c.sweepEvery, stop: make(chan struct{})}
	for i := range s.shards {
		capacity := c.maxKeys / n // the remainder goes one each to the first shards
		if i < c.maxKeys%n {
			capacity++
		}
		s.shards[i].capacity = capacity
		s.shards[i].maxEntries = max(1, c.maxEntries/n)
		s.shards[i].refuse, s.shards[i].stats = c.whenFull == RefuseNewKeys, &s.stats
	}
	if s.sweepEvery > 0 {
		s.swept.Add(1)
		go s.sweeper()
	}
	return s, nil
}

// micros is the store's clock, µs since the Unix epoch. The default reads
// one monotonic clock (no time.Time, no indirect call: this is on the hot
// path), so a wall-clock step does not move windows.
func (s *Store) micros() int64 {
	if s.clock != nil {
		return s.clock().UnixMicro()
	}
	return s.startMicros + int64(time.Since(s.start)/time.Microsecond)
}

// hash is the one hash of req's state: its key's, mixed with the hash of
// its rule's prefix and algorithm (rd, derived once per rule). Its low bits
// pick the shard, its upper half is the tag the shard's index files it
// under.
func (s *Store) hash(req *backend.Request, rd *ruled) uint64 {
	return keyhash.String(s.seed, req.Key) ^ rd.ns
}

// Take implements backend.Store.
//
// A key already held, on the store's own clock, is decided here
// (takeHeld; a sliding log's when its shard has room for one more entry,
// so that nothing is shed): its lock is released by a deferred Unlock,
// with no recover, whose cost a decision would feel (docs/figures.md).
// What runs there cannot panic but on a broken invariant: an index probe
// masked to its slots, a ref the index handed out, the algorithms' integer
// arithmetic over a Rule's rate, whose divisors NewRule keeps at least 1,
// and a log's slices within its head and length. Such a key that the
// store is denying is decided with no lock at all, on an immutable copy of
// its state (denied; a log's, of the part its denials read): the same
// arithmetic, over slots read with atomic loads. Everything else (a new
// key, which may evict; a log at its shard's bound of entries, which
// sheds; a caller's clock, which is the caller's code) is decided under
// guard, which turns a panic into an error wrapping backend.ErrStore.
func (s *Store) Take(ctx context.Context, req backend.Request) (out backend.Outcome, err error) {
	if err = ctx.Err(); err != nil {
		return
	}
	if r := req.Rule; r == nil || req.Cost < 1 || req.Cost > r.MaxCost() || req.Now != 0 || req.Key == "" || len(req.Key) > backend.MaxKeyLen {
		if err = req.Validate(); err != nil { // the common request is checked inline, the rest here
			return
		}
	}
	// out is returned as the algorithm wrote it, field by field: a copy of
	// it to another variable would read back whole what was just written
	// a field at a time, which stalls (a tenth of a decision).
	if err = s.takeTo(&req, &out); err != nil {
		out = backend.Outcome{}
	}
	return
}

// takeTo is Take, its outcome written to out (the algorithm writes it in
// place), under the lock of req's shard, or without it for a key being
// denied (see denials).
//
// The default clock is read before the lock, which is then not held
// through a clock read (a third of a decision; other goroutines wait less
// for the shard). A decision that takes its turn after one that read a
// later time is decided at the key's time, as a caller's clock that steps
// back is (package algorithm's rules): the decisions on a key keep the
// order of the lock, and a state never moves back.
func (s *Store) takeTo(req *backend.Request, out *algorithm.Outcome) error {
	var rd *ruled
	if v, ok := req.Rule.Owned(owned); ok { // ruleOf, inline: a rule seen before
		rd = v.(*ruled)
	} else {
		rd = ruleOf(req.Rule)
	}
	h := s.hash(req, rd)
	sh := &s.shards[h&s.mask]
	if s.clock != nil || rd.block != 0 { // a penalty box is guard's, through sh.take
		return s.takeGuarded(sh, req, rd, h, out)
	}
	// s.micros(), written out (it is not inlined).
	storeNow := s.startMicros + int64(time.Since(s.start)/time.Microsecond)
	now := storeNow
	if req.Now != 0 {
		now = req.Now
	} else if sh.denying.Load() && s.denied(sh, req, rd, h, &now, out) {
		return nil
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.takeHeld(req, rd, h, now, storeNow, out) {
		return nil
	}
	return s.guard(sh, req, rd, h, storeNow, out)
}

// takeGuarded is takeTo on a clock given WithStoreClock (the caller's
// code, read under guard) or for a penalty box's rule.
func (s *Store) takeGuarded(sh *shard, req *backend.Request, rd *ruled, h uint64, out *algorithm.Outcome) error {
	if sh.denying.Load() && rd.block == 0 && req.Now == 0 {
		if ok, err := s.deniedGuarded(sh, req, rd, h, out); ok || err != nil {
			return err
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return s.guard(sh, req, rd, h, 0, out)
}

// guard is Take's decision on every path but takeHeld's, under sh's lock
// (held by the caller), at storeNow on the store's clock (0: read it here):
// a panic comes back as an error, not into the caller's goroutine.
func (s *Store) guard(sh *shard, req *backend.Request, rd *ruled, h uint64, storeNow int64, out *algorithm.Outcome) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicked(r)
		}
	}()
	if storeNow == 0 {
		storeNow = s.micros()
	}
	now := storeNow
	if req.Now != 0 {
		now = req.Now
	}
	return sh.take(req, rd, h, now, storeNow, out)
}

// Peek implements backend.Store.
func (s *Store) Peek(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.decide(ctx, &req, peek)
}

// Refund implements backend.Store.
func (s *Store) Refund(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.decide(ctx, &req, refund)
}

// Charge implements backend.Store.
func (s *Store) Charge(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.decide(ctx, &req, charge)
}

// Acquire implements backend.Store.
func (s *Store) Acquire(ctx context.Context, req backend.Request, id int64) (backend.Outcome, error) {
	return s.permit(ctx, &req, id, true)
}

// Release implements backend.Store.
func (s *Store) Release(ctx context.Context, req backend.Request, id int64) (backend.Outcome, error) {
	return s.permit(ctx, &req, id, false)
}

// permit is Acquire, or Release, under the lock of req's shard, released on
// every path (see unlock); the clock is read under it, as decide's.
func (s *Store) permit(ctx context.Context, req *backend.Request, id int64, acquire bool) (out backend.Outcome, err error) {
	if err = ctx.Err(); err != nil {
		return out, err
	}
	if err = req.ValidateAcquire(id); err != nil {
		return out, err
	}
	rd := ruleOf(req.Rule)
	h := s.hash(req, rd)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.unlock(&err)
	now, storeNow := s.times(req)
	if err = sh.permit(req, rd, h, now, storeNow, id, acquire, &out); err != nil {
		return backend.Outcome{}, err
	}
	return out, nil
}

func (s *Store) decide(ctx context.Context, req *backend.Request, o op) (backend.Outcome, error) {
	if err := ctx.Err(); err != nil {
		return backend.Outcome{}, err
	}
	validate := req.Validate
	if o == charge {
		validate = req.ValidateCharge
	}
	if err := validate(); err != nil {
		return backend.Outcome{}, err
	}
	rd := ruleOf(req.Rule)
	h := s.hash(req, rd)
	return s.decideLocked(&s.shards[h&s.mask], req, rd, h, o)
}

// times reads the store's clock and the request's time, the store's when
// the caller gave none.
func (s *Store) times(req *backend.Request) (now, storeNow int64) {
	storeNow = s.micros()
	if req.Now != 0 {
		return req.Now, storeNow
	}
	return storeNow, storeNow
}

// decideLocked does o for req under the lock of sh, its shard, released on
// every path (see unlock).
func (s *Store) decideLocked(sh *shard, req *backend.Request, rd *ruled, h uint64, o op) (_ backend.Outcome, err error) {
	sh.mu.Lock()
	defer sh.unlock(&err)
	// The store's clock is read under the lock; a Take, the hot path,
	// reads it before (see takeTo), and either way a decision that takes
	// its turn after a later-timed one is decided at the key's time.
	now, storeNow := s.times(req)
	var out backend.Outcome
	if err = sh.decide(req, rd, h, now, storeNow, o, &out); err != nil {
		return backend.Outcome{}, err
	}
	return out, nil
}

// Reset implements backend.Store: it drops the key's state under prefix and
// every algorithm.
func (s *Store) Reset(ctx context.Context, prefix, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, alg := range append(backend.Algorithms(), backend.InFlight) { // the permits too
		h := keyhash.String(s.seed, key) ^ namespace(prefix, alg)
		s.resetLocked(&s.shards[h&s.mask], h, prefix, key, alg)
	}
	return nil
}

func (s *Store) resetLocked(sh *shard, h uint64, prefix, key string, alg backend.Algorithm) {
	sc := unique.Make(scope{prefix, alg})
	sh.mu.Lock()
	defer sh.mu.Unlock()
	switch alg {
	case backend.SlidingWindow:
		forget(sh, &sh.log, h, key, sc)
	case backend.FixedWindow:
		forget(sh, &sh.fixed, h, key, sc)
	case backend.SlidingWindowCounter:
		forget(sh, &sh.counter, h, key, sc)
	case backend.GCRA:
		forget(sh, &sh.gcra, h, key, sc)
	case backend.InFlight:
		forget(sh, &sh.leases, h, key, sc)
	}
	forget(sh, &sh.blocks, h, key, sc) // a penalty box is lifted
}

// forget drops key's state under scope from t, if held.
func forget[S any](sh *shard, t *table[S], h uint64, key string, sc unique.Handle[scope]) {
	if ref, r := t.find(h, key, sc); r != nil {
		sh.remove(t, ref)
	}
}

// Info implements backend.Store: in process (a decision waits on nothing
// but a shard's lock, so a Limiter sets it no time budget), one node, no
// change made elsewhere.
func (s *Store) Info() backend.Info { return backend.Info{InProcess: true, Blocks: true} }

// Len is the number of states held: a key used under several prefixes or
// algorithms counts once for each.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		n += s.shards[i].len()
	}
	return n
}

// Close stops the sweeper. The Store still answers afterwards, without
// sweeping. Close is idempotent.
func (s *Store) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	s.swept.Wait()
	return nil
}

// ActiveEvictions is how many keys were evicted while still inside their
// window (losing their history) since the store was made.
func (s *Store) ActiveEvictions() uint64 { return s.stats.activeEvictions.Load() }

// Refused is how many new keys a full store built WithWhenFull(RefuseNewKeys)
// refused since it was made.
func (s *Store) Refused() uint64 { return s.stats.refused.Load() }
