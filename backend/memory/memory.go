// Package memory is the in-process Store: no server, state lost on restart,
// shared only by the Limiters of one process. It is the default for a
// single-node app and for tests.
//
// Keys are spread over shards, each a mutex guarding an LRU of keys
// (github.com/hashicorp/golang-lru/v2), so decisions on different keys rarely
// contend. A key holds one state per prefix and algorithm it is used under.
// A key's sliding log is a sorted slice of timestamps, pruned by binary
// search; a warm key decides without allocating. The Store is a
// ratelimit.MultiStore: TakeAll decides any requests together, under the
// locks of their shards.
//
// The store is bounded twice: by keys (WithMaxKeys) and by the entries of
// sliding logs (WithMaxEntries), which hold one entry per admitted request
// in the window; the other algorithms hold O(1) state per key. The worst case
// is therefore about MaxKeys*300 bytes plus MaxEntries*16 bytes: 30 MB plus
// 160 MB with the defaults. A background sweeper drops keys whose state has
// expired (its window, or the Limiter's retention, has passed since its last
// write, on the store's clock), which loses nothing. When a bound is reached
// while the least recently used keys are still in use, the store evicts one
// (forgetting its history: ActiveEvictions counts them) or,
// WithWhenFull(RefuseNewKeys), refuses the new key with ErrFull so that the
// Limiter's failure mode decides. Size the bounds above what is active
// within one window.
package memory

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/algorithm"
)

// DefaultMaxKeys bounds the keys a Store holds unless WithMaxKeys says
// otherwise.
const DefaultMaxKeys = 100_000

// DefaultMaxEntries bounds the sliding-log entries a Store holds unless
// WithMaxEntries says otherwise: 16 bytes each.
const DefaultMaxEntries = 10_000_000

// DefaultSweepInterval is how often idle keys are dropped unless
// WithSweepInterval says otherwise.
const DefaultSweepInterval = time.Minute

// Store is the in-memory ratelimit.Store. Create it with New and Close it
// when done to stop its sweeper.
type Store struct {
	shards []shard
	mask   uint64
	seed   maphash.Seed
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

type shard struct {
	mu         sync.Mutex
	keys       *simplelru.LRU[string, *entry]
	capacity   int
	entries    int // log entries held
	maxEntries int
	refuse     bool   // WhenFull is RefuseNewKeys
	stats      *stats // the store's
	policy     ratelimit.Policy
	rate       algorithm.Rate // policy's
	_          [64]byte       // no false sharing of locks between shards
}

// stats counts what the key bound did.
type stats struct {
	activeEvictions atomic.Uint64
	refused         atomic.Uint64
}

// entry is what a shard holds for one key: a state per prefix and algorithm
// the key is used under. A key is looked up by its own string, the cheapest
// map key to hash; the few prefixes it lives under are then compared.
type entry struct {
	slots []slot // usually one: first
	first [1]slot
	// used is the second-chance bit of the CLOCK approximation of LRU: a
	// hit sets it instead of moving the key to the front of the LRU list,
	// which would write to its neighbours (cache misses under load).
	used bool
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

// Option configures a Store.
type Option func(*config)

type config struct {
	whenFull   WhenFull
	maxKeys    int
	maxEntries int
	shards     int
	clock      func() time.Time
	sweepEvery time.Duration
}

// WithMaxKeys bounds the number of keys held (default DefaultMaxKeys). The
// bound is split over the shards, so a shard may evict while others have
// room; the store never holds more than n keys.
func WithMaxKeys(n int) Option { return func(c *config) { c.maxKeys = n } }

// WithMaxEntries bounds the entries of the sliding logs held, over all keys
// (default DefaultMaxEntries): an entry per admitted request still in its
// window, 16 bytes. The bound is split over the shards like WithMaxKeys';
// a shard over it evicts its least recently used keys, never the one being
// decided.
func WithMaxEntries(n int) Option { return func(c *config) { c.maxEntries = n } }

// WhenFull says what a full store does with a new key.
type WhenFull uint8

const (
	// EvictLeastRecent (the default) makes room for the new key: a key
	// whose windows have all passed if the least recently used ones include
	// one, else the least recently used key, whose history is then forgotten
	// (it gets its full quota again: ActiveEvictions counts these).
	EvictLeastRecent WhenFull = iota
	// RefuseNewKeys evicts only keys whose windows have all passed (which
	// loses nothing) and otherwise refuses the new key: Take returns an
	// error wrapping ErrFull, and the Limiter's failure mode decides (fail
	// closed: the error; fail open: an admission). A flood of new keys then
	// cannot reset the quota of a key in the middle of its window.
	RefuseNewKeys
)

// ErrFull is wrapped by the error of a Take refused for a new key by a full
// store built WithWhenFull(RefuseNewKeys).
var ErrFull = errors.New("ratelimit/memory: full: every key is inside its window")

// WithWhenFull says what a full store does with a new key (default
// EvictLeastRecent).
func WithWhenFull(w WhenFull) Option { return func(c *config) { c.whenFull = w } }

// WithStoreClock sets the store's own clock, which decides the requests on
// ratelimit.StoreClock and the sweeper's idea of now (default: the wall clock
// advanced by the monotonic clock, so a wall-clock step does not move
// windows). Requests on ratelimit.CallerClock carry their own time.
func WithStoreClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

// WithSweepInterval sets how often keys whose window has passed are dropped
// (default DefaultSweepInterval); 0 or less disables the sweeper, leaving
// only the LRU bound.
func WithSweepInterval(d time.Duration) Option { return func(c *config) { c.sweepEvery = d } }

// WithShards sets the number of lock shards, rounded up to a power of two
// (default: 16 per CPU, at least 64).
func WithShards(n int) Option { return func(c *config) { c.shards = n } }

// New returns an empty Store.
func New(opts ...Option) *Store {
	c := config{maxKeys: DefaultMaxKeys, maxEntries: DefaultMaxEntries, shards: max(64, 16*runtime.GOMAXPROCS(0)), sweepEvery: DefaultSweepInterval}
	for _, o := range opts {
		o(&c)
	}
	start := time.Now()
	c.maxKeys = max(1, c.maxKeys)
	n := 1
	for n < c.shards && n*2 <= c.maxKeys { // every shard holds a key at least
		n <<= 1
	}
	s := &Store{shards: make([]shard, n), mask: uint64(n - 1), seed: maphash.MakeSeed(), clock: c.clock, start: start, startMicros: start.UnixMicro(), sweepEvery: c.sweepEvery, stop: make(chan struct{})}
	for i := range s.shards {
		capacity := c.maxKeys / n // the remainder goes one each to the first shards
		if i < c.maxKeys%n {
			capacity++
		}
		lru, err := simplelru.NewLRU[string, *entry](capacity, nil)
		if err != nil {
			panic(err) // only for a non-positive size, excluded above
		}
		s.shards[i].keys, s.shards[i].capacity = lru, capacity
		s.shards[i].maxEntries = max(1, c.maxEntries/n)
		s.shards[i].refuse, s.shards[i].stats = c.whenFull == RefuseNewKeys, &s.stats
	}
	if s.sweepEvery > 0 {
		s.swept.Add(1)
		go s.sweeper()
	}
	return s
}

// micros is the store's clock, µs since the Unix epoch. The default reads
// one monotonic clock (no time.Time, no indirect call: this is on the hot
// path), so a wall-clock step does not move windows.
func (s *Store) micros() int64 {
	if s.clock != nil {
		return algorithm.Micros(s.clock())
	}
	return s.startMicros + int64(time.Since(s.start)/time.Microsecond)
}

// Take implements ratelimit.Store.
func (s *Store) Take(ctx context.Context, req ratelimit.Request) (d ratelimit.Decision, err error) {
	if err := ctx.Err(); err != nil {
		return ratelimit.Decision{}, err
	}
	if err := req.Validate(); err != nil {
		return ratelimit.Decision{}, err
	}
	out, err := s.takeLocked(s.shard(req.Key.ID), &req)
	if err != nil {
		return ratelimit.Decision{}, err
	}
	// Field by field into the result: a Decision is returned in memory,
	// and copying one just written stalls the CPU.
	limit := req.Policy.MaxCost()
	d.Allowed, d.Limit, d.Remaining, d.Count = out.Allowed, limit, int(max(int64(limit)-out.Count, 0)), int(out.Count)
	d.ResetAt, d.RetryAfter, d.At = time.UnixMicro(out.ResetAt), time.Duration(out.RetryAfter)*time.Microsecond, time.UnixMicro(out.At)
	return d, nil
}

// takeLocked decides req under the lock of sh, its shard, released on every
// path (see unlock).
func (s *Store) takeLocked(sh *shard, req *ratelimit.Request) (_ algorithm.Outcome, err error) {
	sh.mu.Lock()
	defer sh.unlock(&err)
	// The store's clock is read under the lock, so that the decisions on a
	// key are made in the order of their times, as on a server.
	now, storeNow := s.now(req)
	e, ok := sh.keys.Peek(req.Key.ID)
	var sl *slot
	if ok {
		sl = e.slot(req.Key.Prefix, req.Policy.Algorithm)
	}
	if sl == nil { // a new key, or new to this prefix or algorithm
		return sh.decide(req, now, storeNow, take)
	}
	// The hot path: a key seen before.
	e.used = true
	return sh.take(sl, req, now, storeNow), nil
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
		sh.policy, sh.rate = *p, algorithm.RateOf(*p)
	}
	return sh.rate
}

// Peek implements ratelimit.Store.
func (s *Store) Peek(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return s.decide(ctx, &req, peek)
}

// Refund implements ratelimit.RefundStore.
func (s *Store) Refund(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return s.decide(ctx, &req, refund)
}

// op is what a decision does.
type op uint8

const (
	peek op = iota
	take
	refund
)

func (s *Store) decide(ctx context.Context, req *ratelimit.Request, o op) (ratelimit.Decision, error) {
	if err := ctx.Err(); err != nil {
		return ratelimit.Decision{}, err
	}
	if err := req.Validate(); err != nil {
		return ratelimit.Decision{}, err
	}
	out, err := s.decideLocked(s.shard(req.Key.ID), req, o)
	if err != nil {
		return ratelimit.Decision{}, err
	}
	return out.Decision(req.Policy.MaxCost()), nil
}

// decideLocked does o for req under the lock of sh, its shard, released on
// every path (see unlock).
func (s *Store) decideLocked(sh *shard, req *ratelimit.Request, o op) (_ algorithm.Outcome, err error) {
	sh.mu.Lock()
	defer sh.unlock(&err)
	// The store's clock is read under the lock, so that the decisions on a
	// key are made in the order of their times, as on a server.
	now, storeNow := s.now(req)
	return sh.decide(req, now, storeNow, o)
}

// TakeAll implements ratelimit.MultiStore: the shards of every request are
// locked (in a fixed order), then every request is peeked at and, if all
// would be admitted, taken.
func (s *Store) TakeAll(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	shards := make([]uint64, 0, len(reqs))
	for i, req := range reqs {
		if err := req.Validate(); err != nil {
			return nil, err
		}
		for _, other := range reqs[:i] {
			if other.Key == req.Key && other.Policy.Algorithm == req.Policy.Algorithm {
				return nil, fmt.Errorf("ratelimit/memory: two requests on the state of %q under %q: %w", req.Key.ID, req.Key.Prefix, errors.ErrUnsupported)
			}
		}
		shards = append(shards, s.shardIndex(req.Key.ID))
	}
	slices.Sort(shards) // locks are taken in one order: no deadlock between two TakeAlls
	shards = slices.Compact(shards)
	outs, err := s.takeAllLocked(shards, reqs)
	if err != nil {
		return nil, err
	}
	ds := make([]ratelimit.Decision, len(reqs))
	for i, out := range outs {
		ds[i] = out.Decision(reqs[i].Policy.MaxCost())
	}
	return ds, nil
}

// takeAllLocked decides reqs under the locks of shards (sorted), released
// on every path (see unlock).
func (s *Store) takeAllLocked(shards []uint64, reqs []ratelimit.Request) (_ []algorithm.Outcome, err error) {
	for _, i := range shards {
		s.shards[i].mu.Lock()
	}
	defer func() {
		if r := recover(); r != nil {
			err = panicked(r)
		}
		for _, i := range shards {
			s.shards[i].mu.Unlock()
		}
	}()
	storeNow := s.micros() // one instant for the requests on the store's clock
	at := func(req ratelimit.Request) int64 {
		if req.Clock == ratelimit.CallerClock {
			return algorithm.Micros(req.Now)
		}
		return storeNow
	}
	outs := make([]algorithm.Outcome, len(reqs))
	all := true
	for i, req := range reqs {
		outs[i], _ = s.shard(req.Key.ID).decide(&reqs[i], at(req), storeNow, peek) // a peek stores nothing: never refused
		all = all && outs[i].Allowed
	}
	for i := 0; all && i < len(reqs) && err == nil; i++ {
		// A full store refusing a new key (RefuseNewKeys) may do so after
		// an earlier request of the batch was recorded: the error is
		// returned all the same.
		outs[i], err = s.shard(reqs[i].Key.ID).decide(&reqs[i], at(reqs[i]), storeNow, take)
	}
	return outs, err
}

// now is the time req is decided at and the store's time, µs.
func (s *Store) now(req *ratelimit.Request) (now, storeNow int64) {
	storeNow = s.micros()
	if req.Clock == ratelimit.CallerClock {
		return algorithm.Micros(req.Now), storeNow
	}
	return storeNow, storeNow
}

// decide does o for req at now on the shard, whose lock is held; storeNow
// is the store's clock, which expiry is kept on.
func (sh *shard) decide(req *ratelimit.Request, now, storeNow int64, o op) (algorithm.Outcome, error) {
	alg := req.Policy.Algorithm
	e, ok := sh.keys.Peek(req.Key.ID)
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
			return empty.decide(req, algorithm.RateOf(req.Policy), now, peek), nil
		}
		if !ok {
			e = newEntry()
			if !sh.add(req.Key.ID, e, storeNow) {
				return algorithm.Outcome{}, fmt.Errorf("%w (%d keys in this shard)", ErrFull, sh.capacity)
			}
		}
		e.slots = append(e.slots, slot{prefix: req.Key.Prefix, alg: alg})
		sl = &e.slots[len(e.slots)-1]
	}
	e.used = true
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
	for i := sh.keys.Len(); i > 0 && sh.entries > sh.maxEntries; i-- {
		k, v, _ := sh.keys.GetOldest()
		if k == keep {
			sh.keys.Get(k) // to the front
			continue
		}
		if !v.idle(now) {
			sh.stats.activeEvictions.Add(1)
		}
		sh.remove(k, v)
	}
}

// remove drops key, whose entry is v.
func (sh *shard) remove(key string, v *entry) {
	sh.entries -= v.entries()
	sh.keys.Remove(key)
}

// Reset implements ratelimit.Store: it drops the key's state under every
// algorithm.
func (s *Store) Reset(ctx context.Context, key ratelimit.Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := s.shard(key.ID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.keys.Peek(key.ID)
	if !ok {
		return nil
	}
	held := e.entries()
	e.slots = slices.DeleteFunc(e.slots, func(sl slot) bool { return sl.prefix == key.Prefix })
	sh.entries -= held - e.entries()
	for i := range e.slots {
		if !e.slots[i].empty() {
			return nil
		}
	}
	sh.remove(key.ID, e)
	return nil
}

// InProcess implements ratelimit.InProcessStore: a decision waits on nothing
// but a shard's lock, so a Limiter sets it no time budget.
func (s *Store) InProcess() bool { return true }

// Len is the number of keys held (a key used under several prefixes or
// algorithms counts once).
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

// add inserts a new key, making room when the shard is full: keys used since
// they last reached the back of the list get a second chance at the front,
// unless idle; the first one that was not used (or is idle) goes, unless it
// is still inside its window and the store refuses new keys (false).
func (sh *shard) add(key string, e *entry, now int64) bool {
	for i := sh.keys.Len(); i > 0 && sh.keys.Len() >= sh.capacity; i-- {
		oldest, v, _ := sh.keys.GetOldest()
		if !v.used || v.idle(now) {
			break
		}
		v.used = false
		sh.keys.Get(oldest) // moves it to the front
	}
	if sh.keys.Len() >= sh.capacity {
		if _, v, ok := sh.keys.GetOldest(); ok && !v.idle(now) {
			if sh.refuse {
				sh.stats.refused.Add(1)
				return false
			}
			sh.stats.activeEvictions.Add(1)
		}
		k, v, _ := sh.keys.GetOldest()
		sh.remove(k, v)
	}
	sh.keys.Add(key, e)
	return true
}

// ActiveEvictions is how many keys were evicted while still inside their
// window (losing their history) since the store was made.
func (s *Store) ActiveEvictions() uint64 { return s.stats.activeEvictions.Load() }

// Refused is how many new keys a full store built WithWhenFull(RefuseNewKeys)
// refused since it was made.
func (s *Store) Refused() uint64 { return s.stats.refused.Load() }

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
	return sh.keys.Len()
}

func (s *Store) shard(key string) *shard { return &s.shards[s.shardIndex(key)] }

func (s *Store) shardIndex(key string) uint64 { return maphash.String(s.seed, key) & s.mask }

func (s *Store) sweeper() {
	defer s.swept.Done()
	tick := time.NewTicker(s.sweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			s.Sweep()
		}
	}
}

// Sweep drops every key whose windows have all passed, and reports how many
// it dropped. The sweeper calls it; call it yourself with the sweeper off.
func (s *Store) Sweep() int {
	now := s.micros()
	dropped := 0
	for i := range s.shards {
		dropped += s.shards[i].sweep(now)
	}
	return dropped
}

// sweep drops the shard's keys whose windows have all passed at now.
func (sh *shard) sweep(now int64) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	dropped := 0
	for _, k := range sh.keys.Keys() {
		if e, ok := sh.keys.Peek(k); ok && e.idle(now) {
			sh.remove(k, e)
			dropped++
		}
	}
	return dropped
}
