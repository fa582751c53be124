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
// The number of keys is bounded (WithMaxKeys). A background sweeper drops
// keys whose windows have all passed, which loses nothing. When the bound is
// reached while the least recently used keys are still inside their windows,
// the store evicts one (forgetting its history: ActiveEvictions counts them)
// or, WithWhenFull(RefuseNewKeys), refuses the new key with ErrFull so that
// the Limiter's failure mode decides. Size the bound above the number of keys
// active within one window.
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

// DefaultSweepInterval is how often idle keys are dropped unless
// WithSweepInterval says otherwise.
const DefaultSweepInterval = time.Minute

// Store is the in-memory ratelimit.Store. Create it with New and Close it
// when done to stop its sweeper.
type Store struct {
	shards []shard
	mask   uint64
	seed   maphash.Seed
	micros func() int64 // the store's clock, µs since the Unix epoch

	stats      stats
	sweepEvery time.Duration
	stop       chan struct{}
	stopOnce   sync.Once
	swept      sync.WaitGroup
}

type shard struct {
	mu       sync.Mutex
	keys     *simplelru.LRU[string, *entry]
	capacity int
	refuse   bool          // WhenFull is RefuseNewKeys
	stats    *stats        // the store's
	_        [64 - 40]byte // one shard per cache line: no false sharing of locks
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

type state struct {
	log     algorithm.Log
	counter algorithm.Counter
	// idleAt is when the state holds nothing in its window any more, under
	// the window it was last written with (µs).
	idleAt int64
}

// empty reports whether the state holds no history.
func (st *state) empty() bool { return st.log.Len() == 0 && st.counter.Empty() }

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

// idle reports whether every state of the key holds nothing at now.
func (e *entry) idle(now int64) bool {
	for i := range e.slots {
		if e.slots[i].idleAt > now {
			return false
		}
	}
	return true
}

// Option configures a Store.
type Option func(*config)

type config struct {
	whenFull   WhenFull
	maxKeys    int
	shards     int
	clock      func() time.Time
	sweepEvery time.Duration
}

// WithMaxKeys bounds the number of keys held (default DefaultMaxKeys). The
// bound is split over the shards, so a shard may evict while others have
// room; the store never holds more than n keys.
func WithMaxKeys(n int) Option { return func(c *config) { c.maxKeys = n } }

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
	c := config{maxKeys: DefaultMaxKeys, shards: max(64, 16*runtime.GOMAXPROCS(0)), sweepEvery: DefaultSweepInterval}
	for _, o := range opts {
		o(&c)
	}
	micros := monotonicMicros()
	if c.clock != nil {
		micros = func() int64 { return algorithm.Micros(c.clock()) }
	}
	c.maxKeys = max(1, c.maxKeys)
	n := 1
	for n < c.shards && n*2 <= c.maxKeys { // every shard holds a key at least
		n <<= 1
	}
	s := &Store{shards: make([]shard, n), mask: uint64(n - 1), seed: maphash.MakeSeed(), micros: micros, sweepEvery: c.sweepEvery, stop: make(chan struct{})}
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
		s.shards[i].refuse, s.shards[i].stats = c.whenFull == RefuseNewKeys, &s.stats
	}
	if s.sweepEvery > 0 {
		s.swept.Add(1)
		go s.sweeper()
	}
	return s
}

// monotonicMicros reads the wall clock once and advances it by the
// monotonic clock from then on, in integers (no time.Time on the hot path).
func monotonicMicros() func() int64 {
	start := time.Now()
	startMicros := start.UnixMicro()
	return func() int64 { return startMicros + int64(time.Since(start)/time.Microsecond) }
}

// Take implements ratelimit.Store.
func (s *Store) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	// The body of decide, written out: this is the hot path.
	if err := ctx.Err(); err != nil {
		return ratelimit.Decision{}, err
	}
	sh := s.shard(req.Key.ID)
	sh.mu.Lock()
	out, err := sh.decide(&req, s.now(&req), true)
	sh.mu.Unlock()
	if err != nil {
		return ratelimit.Decision{}, err
	}
	return out.Decision(req.Policy.Limit), nil
}

// Peek implements ratelimit.Store.
func (s *Store) Peek(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return s.decide(ctx, &req, false)
}

func (s *Store) decide(ctx context.Context, req *ratelimit.Request, record bool) (ratelimit.Decision, error) {
	if err := ctx.Err(); err != nil {
		return ratelimit.Decision{}, err
	}
	sh := s.shard(req.Key.ID)
	sh.mu.Lock()
	// The store's clock is read under the lock, so that the decisions on a
	// key are made in the order of their times, as on a server.
	out, err := sh.decide(req, s.now(req), record)
	sh.mu.Unlock()
	if err != nil {
		return ratelimit.Decision{}, err
	}
	return out.Decision(req.Policy.Limit), nil
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
		for _, other := range reqs[:i] {
			if other.Key == req.Key && other.Policy.Algorithm == req.Policy.Algorithm {
				return nil, fmt.Errorf("ratelimit/memory: two requests on the state of %q under %q: %w", req.Key.ID, req.Key.Prefix, errors.ErrUnsupported)
			}
		}
		shards = append(shards, s.shardIndex(req.Key.ID))
	}
	slices.Sort(shards) // locks are taken in one order: no deadlock between two TakeAlls
	shards = slices.Compact(shards)
	for _, i := range shards {
		s.shards[i].mu.Lock()
	}
	now := s.micros() // one instant for the requests on the store's clock
	at := func(req ratelimit.Request) int64 {
		if req.Clock == ratelimit.CallerClock {
			return algorithm.Micros(req.Now)
		}
		return now
	}
	outs := make([]algorithm.Outcome, len(reqs))
	all := true
	var err error
	for i, req := range reqs {
		outs[i], _ = s.shard(req.Key.ID).decide(&reqs[i], at(req), false) // a peek stores nothing: never refused
		all = all && outs[i].Allowed
	}
	for i := 0; all && i < len(reqs) && err == nil; i++ {
		// A full store refusing a new key (RefuseNewKeys) may do so after
		// an earlier request of the batch was recorded: the error is
		// returned all the same.
		outs[i], err = s.shard(reqs[i].Key.ID).decide(&reqs[i], at(reqs[i]), true)
	}
	for _, i := range shards {
		s.shards[i].mu.Unlock()
	}
	if err != nil {
		return nil, err
	}
	ds := make([]ratelimit.Decision, len(reqs))
	for i, out := range outs {
		ds[i] = out.Decision(reqs[i].Policy.Limit)
	}
	return ds, nil
}

// now is the time req is decided at, µs.
func (s *Store) now(req *ratelimit.Request) int64 {
	if req.Clock == ratelimit.CallerClock {
		return algorithm.Micros(req.Now)
	}
	return s.micros()
}

// decide decides req at now on the shard, whose lock is held.
func (sh *shard) decide(req *ratelimit.Request, now int64, record bool) (algorithm.Outcome, error) {
	window, limit, alg := algorithm.WindowMicros(req.Policy), req.Policy.Limit, req.Policy.Algorithm
	e, ok := sh.keys.Peek(req.Key.ID)
	var sl *slot
	if ok {
		sl = e.slot(req.Key.Prefix, alg)
	}
	if sl == nil {
		if !record { // a peek at an unknown state: nothing to store
			var empty state
			return empty.decide(alg, now, window, limit, req.Cost, false), nil
		}
		if !ok {
			e = newEntry()
			if !sh.add(req.Key.ID, e, now) {
				return algorithm.Outcome{}, fmt.Errorf("%w (%d keys in this shard)", ErrFull, sh.capacity)
			}
		}
		e.slots = append(e.slots, slot{prefix: req.Key.Prefix, alg: alg})
		sl = &e.slots[len(e.slots)-1]
	}
	e.used = true
	return sl.decide(alg, now, window, limit, req.Cost, record), nil
}

func (st *state) decide(alg ratelimit.Algorithm, now, window int64, limit, cost int, record bool) algorithm.Outcome {
	if alg == ratelimit.FixedWindow {
		if !record {
			return st.counter.Peek(now, window, limit, cost)
		}
		out := st.counter.Take(now, window, limit, cost)
		if !st.counter.Empty() {
			st.idleAt = st.counter.End(window)
		}
		return out
	}
	if !record {
		return st.log.Peek(now, window, limit, cost)
	}
	out := st.log.Take(now, window, limit, cost)
	if newest, ok := st.log.Newest(); ok {
		st.idleAt = newest + window
	}
	return out
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
	e.slots = slices.DeleteFunc(e.slots, func(sl slot) bool { return sl.prefix == key.Prefix })
	for i := range e.slots {
		if !e.slots[i].empty() {
			return nil
		}
	}
	sh.keys.Remove(key.ID)
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
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.keys.Len()
		sh.mu.Unlock()
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
		sh.keys.RemoveOldest()
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
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, k := range sh.keys.Keys() {
			if e, ok := sh.keys.Peek(k); ok && e.idle(now) {
				sh.keys.Remove(k)
				dropped++
			}
		}
		sh.mu.Unlock()
	}
	return dropped
}
