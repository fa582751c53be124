// Package memory is the in-process Store: no server, state lost on restart,
// shared only by the Limiters of one process. It is the default for a
// single-node app and for tests.
//
// Keys are spread over shards, each a mutex guarding an LRU of keys
// (github.com/hashicorp/golang-lru/v2), so decisions on different keys rarely
// contend. A key holds one state per prefix and algorithm it is used under. A key's sliding log is a sorted slice of timestamps, pruned by
// binary search; a warm key decides without allocating.
//
// The number of keys is bounded (WithMaxKeys). A background sweeper drops
// keys whose windows have all passed, which loses nothing; when the bound is reached
// while every key is still active, the least recently used key is evicted and
// its history forgotten, so size the bound above the number of keys active
// within one window.
package memory

import (
	"context"
	"hash/maphash"
	"runtime"
	"sync"
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

	sweepEvery time.Duration
	stop       chan struct{}
	stopOnce   sync.Once
	swept      sync.WaitGroup
}

type shard struct {
	mu       sync.Mutex
	keys     *simplelru.LRU[string, *entry]
	capacity int
	_        [64 - 24]byte // one shard per cache line: no false sharing of locks
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
func (st *state) empty() bool { return st.log.Len() == 0 && !st.counter.Started }

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
	maxKeys    int
	shards     int
	clock      func() time.Time
	sweepEvery time.Duration
}

// WithMaxKeys bounds the number of keys held (default DefaultMaxKeys). The
// bound is split over the shards, so a shard may evict while others have
// room; the store never holds more than n keys.
func WithMaxKeys(n int) Option { return func(c *config) { c.maxKeys = n } }

// WithClock sets the store's clock, used for requests that carry no time
// (default: the wall clock advanced by the monotonic clock, so a wall-clock
// step does not move windows).
func WithClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

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
	if err := ctx.Err(); err != nil {
		return ratelimit.Decision{}, err
	}
	window, limit := algorithm.WindowMicros(req.Policy), req.Policy.Limit
	alg := req.Policy.Algorithm
	sh := s.shard(req.Key)

	sh.mu.Lock()
	// The store's clock is read under the lock, so that the decisions on a
	// key are made in the order of their times, as on a server.
	var nowUS int64
	if req.Now.IsZero() {
		nowUS = s.micros()
	} else {
		nowUS = algorithm.Micros(req.Now)
	}
	e, ok := sh.keys.Peek(req.Key)
	var sl *slot
	if ok {
		sl = e.slot(req.Prefix, alg)
	}
	if sl == nil {
		if req.Cost == 0 { // a peek at an unknown state: nothing to store
			sh.mu.Unlock()
			var empty state
			return empty.take(alg, nowUS, window, limit, 0).Decision(limit), nil
		}
		if !ok {
			e = newEntry()
			sh.add(req.Key, e)
		}
		e.slots = append(e.slots, slot{prefix: req.Prefix, alg: alg})
		sl = &e.slots[len(e.slots)-1]
	}
	e.used = true
	out := sl.take(alg, nowUS, window, limit, req.Cost)
	sh.mu.Unlock()
	return out.Decision(limit), nil
}

func (st *state) take(alg ratelimit.Algorithm, now, window int64, limit, cost int) algorithm.Outcome {
	if alg == ratelimit.FixedWindow {
		out := st.counter.Take(now, window, limit, cost)
		if st.counter.Started {
			st.idleAt = st.counter.End(window)
		}
		return out
	}
	out := st.log.Take(now, window, limit, cost)
	if newest, ok := st.log.Newest(); ok {
		st.idleAt = newest + window
	}
	return out
}

// Reset implements ratelimit.Store.
func (s *Store) Reset(ctx context.Context, req ratelimit.Request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := s.shard(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.keys.Peek(req.Key)
	if !ok {
		return nil
	}
	if sl := e.slot(req.Prefix, req.Policy.Algorithm); sl != nil {
		sl.state = state{} // an empty state is no history; its memory goes
	}
	for i := range e.slots {
		if !e.slots[i].empty() {
			return nil
		}
	}
	sh.keys.Remove(req.Key)
	return nil
}

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

// add inserts a new key, evicting when the shard is full: keys used since
// they last reached the back of the list get a second chance at the front;
// the first one that was not used goes.
func (sh *shard) add(key string, e *entry) {
	for i := sh.keys.Len(); i > 0 && sh.keys.Len() >= sh.capacity; i-- {
		oldest, v, _ := sh.keys.GetOldest()
		if !v.used {
			break
		}
		v.used = false
		sh.keys.Get(oldest) // moves it to the front
	}
	sh.keys.Add(key, e)
}

func (s *Store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)&s.mask]
}

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
