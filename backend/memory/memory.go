// Package memory is the in-process Store: no server, state lost on restart,
// shared only by the Limiters of one process. It is the default for a
// single-node app and for tests.
//
// Keys are spread over shards, each a mutex guarding a table of keys, so
// decisions on different keys rarely contend. A key holds one state per
// prefix and algorithm it is used under. A key's sliding log is a sorted
// slice of timestamps, pruned by binary search; a warm key decides without
// allocating. The Store is a ratelimit.MultiStore: TakeAll decides any
// requests together, under the locks of their shards.
//
// The store is bounded twice: by keys (WithMaxKeys) and by the entries of
// sliding logs (WithMaxEntries), which hold one entry per admitted request
// in the window; the other algorithms hold O(1) state per key. The worst case
// is therefore about MaxKeys*300 bytes plus MaxEntries*16 bytes: 30 MB plus
// 160 MB with the defaults. A background sweeper drops keys whose state has
// expired (its window, or the Limiter's retention, has passed since its last
// write, on the store's clock), which loses nothing.
//
// When a shard is full, a new key takes the place of an expired key if
// there is one, else of the oldest key used only once (on probation), and
// only when every key was used again since it arrived, of the least
// recently used (github.com/hashicorp/golang-lru/v2 keeps the order). A
// flood of new keys therefore cannot evict a key in active use while it
// holds keys used once. A key evicted inside its window forgets its history
// (ActiveEvictions counts them); WithWhenFull(RefuseNewKeys) refuses the new
// key with ErrFull instead, so that the Limiter's failure mode decides. Size
// the bounds above what is active within one window.
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

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/algorithm"
	"github.com/ratelimit-go/ratelimit/internal/outcome"
)

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

// stats counts what the key bound did.
type stats struct {
	activeEvictions atomic.Uint64
	refused         atomic.Uint64
}

// New returns an empty Store. A bound under 1 (WithMaxKeys,
// WithMaxEntries, WithShards) or an unknown WhenFull is an error wrapping
// ratelimit.ErrInvalidArgument.
func New(opts ...Option) (*Store, error) {
	c := config{maxKeys: DefaultMaxKeys, maxEntries: DefaultMaxEntries, shards: max(64, 16*runtime.GOMAXPROCS(0)), sweepEvery: DefaultSweepInterval}
	for _, o := range opts {
		o(&c)
	}
	switch {
	case c.maxKeys < 1:
		return nil, fmt.Errorf("%w: memory: WithMaxKeys(%d), want at least 1", ratelimit.ErrInvalidArgument, c.maxKeys)
	case c.maxEntries < 1:
		return nil, fmt.Errorf("%w: memory: WithMaxEntries(%d), want at least 1", ratelimit.ErrInvalidArgument, c.maxEntries)
	case c.shards < 1:
		return nil, fmt.Errorf("%w: memory: WithShards(%d), want at least 1", ratelimit.ErrInvalidArgument, c.shards)
	case c.whenFull != EvictLeastRecent && c.whenFull != RefuseNewKeys:
		return nil, fmt.Errorf("%w: memory: WithWhenFull(%d), an unknown policy", ratelimit.ErrInvalidArgument, c.whenFull)
	}
	start := time.Now()
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
		s.shards[i].keys = newTable(capacity)
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
	var out algorithm.Outcome
	if err := s.takeLocked(s.shard(req.Key.ID), &req, &out); err != nil {
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
// The outcome is written to out, not returned: a copy fewer on the hot path.
func (s *Store) takeLocked(sh *shard, req *ratelimit.Request, out *algorithm.Outcome) (err error) {
	sh.mu.Lock()
	defer sh.unlock(&err)
	// The store's clock is read under the lock, so that the decisions on a
	// key are made in the order of their times, as on a server.
	now, storeNow := s.now(req)
	e, ok := sh.keys.get(req.Key.ID)
	var sl *slot
	if ok {
		sl = e.slot(req.Key.Prefix, req.Policy.Algorithm)
	}
	if sl == nil { // a new key, or new to this prefix or algorithm
		*out, err = sh.decide(req, now, storeNow, take)
		return err
	}
	// The hot path: a key seen before.
	sh.keys.used(req.Key.ID, e)
	*out = sh.take(sl, req, now, storeNow)
	return nil
}

// Peek implements ratelimit.Store.
func (s *Store) Peek(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return s.decide(ctx, &req, peek)
}

// Refund implements ratelimit.RefundStore.
func (s *Store) Refund(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return s.decide(ctx, &req, refund)
}

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
	return outcome.Decision(out, req.Policy.MaxCost()), nil
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
		ds[i] = outcome.Decision(out, reqs[i].Policy.MaxCost())
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

// Reset implements ratelimit.Store: it drops the key's state under every
// algorithm.
func (s *Store) Reset(ctx context.Context, key ratelimit.Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := s.shard(key.ID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.keys.get(key.ID)
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

// ActiveEvictions is how many keys were evicted while still inside their
// window (losing their history) since the store was made.
func (s *Store) ActiveEvictions() uint64 { return s.stats.activeEvictions.Load() }

// Refused is how many new keys a full store built WithWhenFull(RefuseNewKeys)
// refused since it was made.
func (s *Store) Refused() uint64 { return s.stats.refused.Load() }

func (s *Store) shard(key string) *shard { return &s.shards[s.shardIndex(key)] }

func (s *Store) shardIndex(key string) uint64 { return maphash.String(s.seed, key) & s.mask }
