// Package nearcache remembers denials near the caller, so that a flood from
// one abusive key costs no round trip per request: a layer over any
// backend.Store.
//
// When the store denies a key a request of cost 1 because the key is at its
// limit, the answer stays the same until the denial's RetryAfter passes:
// nothing frees quota before then (the oldest request leaves, the window
// ends, the counter or the bucket drops a request's worth exactly then),
// and every other instance is denied as well. A key over its limit (a
// limit lowered under it) stays denied as long, and its answer stays the
// same until its ResetAt, when its count next drops. The cache keeps such
// denials, per key and algorithm, and answers the key's requests of cost 1
// itself until then (the earlier of the two), with the same Decision
// fields (RetryAfter counting down, At moving on), then asks the store
// again; a peek of cost 1 at such a key gets the same answer. It never
// admits: everything but those denials goes to the store (admissions,
// peeks of keys it holds no denial of, larger costs). It never denies longer
// than the store would, but for what it cannot see: a policy change makes
// it ask the store (a cached denial is only used under the policy that made
// it), and Reset and Refund through this Store clear the key. Over a store
// that tells of changes (its backend.Info's Changes: the Redis and Valkey
// stores, through a channel of the server), a Reset or a Refund made
// through another instance clears it too, within milliseconds, and the
// cache answers only while it hears that channel; over another store such a
// change is seen only when the cached denial ends. A denial whose reply
// arrives after a change to its key was made or heard is not cached: the
// change may have overtaken it on the way. Close stops listening.
//
// On the store's clock, a server's, the cache counts the retry-after on the
// local monotonic clock from the moment the request was sent, so it asks
// again no later than the server would admit. The cache holds at most
// size keys (github.com/hashicorp/golang-lru/v2), the least recently used
// leaving first (a hit moves its key to the front only once it may have
// drifted half way back: see get).
package nearcache

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/ratelimit-go/ratelimit/backend"
)

// DefaultSize is the number of keys a cache holds unless WithSize says
// otherwise: about 200 bytes each.
const DefaultSize = 10_000

// Store is a backend.Store answering cached denials itself and asking the
// store it wraps for everything else: every other operation is the wrapped
// store's, and so is its Info, whatever the order of the layers.
type Store struct {
	next  backend.Store
	info  backend.Info
	cache *lru.Cache[slot, *cached]
	// moves counts the keys moved to the LRU's front (see get), and half
	// is half its size.
	moves  atomic.Uint64
	half   uint64
	hits   atomic.Uint64
	misses atomic.Uint64
	// hearing, over a store that tells of changes, reports whether every Reset
	// and Refund made through any instance is heard now: the cache is
	// used only then. nil: the store tells of none, and the cache holds
	// denials for their RetryAfter.
	hearing func() bool
	stop    context.CancelFunc
	closed  atomic.Bool
	// changes count the changes made or heard, by stripe of keys (a key's
	// stripe: its hash), and purges those of every key. A denial is cached
	// only if neither moved while its request was on its way: a Reset or
	// Refund heard meanwhile may have overtaken it.
	changes [stripes]atomic.Uint64
	purges  atomic.Uint64
	seed    maphash.Seed
}

// Store is a whole store: every operation of the contract.
var _ backend.Store = (*Store)(nil)

// stripes is the number of stripes of keys whose changes are counted apart.
const stripes = 256

// generation is what counts the changes of key: its stripe's count, and the
// purges'.
type generation struct{ stripe, purges uint64 }

func (s *Store) stripe(key string) *atomic.Uint64 {
	return &s.changes[maphash.String(s.seed, key)%stripes]
}

func (s *Store) generation(key string) generation {
	return generation{s.stripe(key).Load(), s.purges.Load()}
}

// slot names a key's state under one algorithm.
type slot struct {
	prefix, key string
	alg         backend.Algorithm
}

func slotOf(req *backend.Request) slot { return slot{req.Rule.Prefix(), req.Key, req.Rule.Algorithm()} }

// denial is a cached denial: the outcome, the rule and clock that made it,
// and when it ends.
type denial struct {
	out    backend.Outcome
	rule   *backend.Rule
	caller bool // on the caller's clock
	// until is when the answer stops holding (the denial's end, or the
	// next drop of the count of a key over its limit), retry when the
	// denial ends: on the caller's clock, times on it (µs); on the
	// store's, durations from sent, when the request went out, on the
	// local monotonic clock.
	until, retry int64
	sent         time.Time
}

// Option configures a Store.
type Option func(*config)

type config struct{ size int }

// WithSize bounds the denials cached (default DefaultSize); at least 1.
func WithSize(n int) Option { return func(c *config) { c.size = n } }

// New returns a Store over next caching denials. A nil store, or an option
// out of its bounds, is an error wrapping backend.ErrInvalidArgument.
func New(next backend.Store, opts ...Option) (*Store, error) {
	if next == nil {
		return nil, fmt.Errorf("ratelimit/nearcache: %w: nil store", backend.ErrInvalidArgument)
	}
	c := config{size: DefaultSize}
	for _, o := range opts {
		o(&c)
	}
	if c.size < 1 {
		return nil, fmt.Errorf("ratelimit/nearcache: %w: WithSize(%d): want at least 1", backend.ErrInvalidArgument, c.size)
	}
	cache, err := lru.New[slot, *cached](c.size)
	if err != nil {
		return nil, fmt.Errorf("ratelimit/nearcache: %w: %w", backend.ErrInvalidArgument, err)
	}
	s := &Store{next: next, info: next.Info(), cache: cache, half: uint64(c.size / 2), stop: func() {}, seed: maphash.MakeSeed()}
	if s.info.Changes != nil {
		ctx, cancel := context.WithCancel(context.Background())
		if s.hearing = s.info.Changes(ctx, s.changed); s.hearing != nil {
			s.stop = cancel
		} else {
			cancel()
		}
	}
	return s, nil
}

// trusted reports whether the cache may answer: it hears every change made
// through other instances, or the store tells of none.
func (s *Store) trusted() bool {
	return s.hearing == nil || (!s.closed.Load() && s.hearing())
}

// changed forgets key under prefix, changed through another instance; or
// everything when some changes may have been missed.
func (s *Store) changed(prefix, key string) {
	if prefix == "" && key == "" {
		s.purges.Add(1) // before the purge: see Take
		s.cache.Purge()
		return
	}
	s.forget(prefix, key)
}

// Close stops listening for changes made through other instances. The
// Store still answers afterwards, asking the store every time.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.stop()
	return nil
}

// Take implements backend.Store: a request of cost 1 on a key with a
// cached denial is denied here; anything else is the store's.
func (s *Store) Take(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	if !cacheable(&req) || !s.trusted() {
		out, err := s.next.Take(ctx, req)
		if err == nil {
			s.admitted(&req, out)
		}
		return out, err
	}
	k := slotOf(&req)
	if c, ok := s.get(k); ok {
		if out, ok := c.answer(&req); ok {
			s.hits.Add(1)
			return out, nil
		}
		s.cache.Remove(k)
	}
	s.misses.Add(1)
	gen, sent := s.generation(req.Key), time.Now()
	out, err := s.next.Take(ctx, req)
	if err == nil {
		s.consider(&req, out, sent, gen)
		s.admitted(&req, out)
	}
	return out, err
}

// admitted ends the key's cached denials when req, on the caller's clock,
// was admitted. That clock may step back, and the key's time then stays at
// its latest decision's (package algorithm's rules), where a denial cached
// before the admission may no longer hold: a larger request (the store's to
// decide) admitted in a fixed window's next one, the clock a millisecond
// back, and the cache denied what the store admits. The change it counts
// keeps a denial decided before the admission and arriving after it from
// being cached. On the store's clock time never steps back, and nothing is
// admitted before a cached denial ends but after a change the cache hears.
func (s *Store) admitted(req *backend.Request, out backend.Outcome) {
	if req.Now != 0 && req.Rule != nil && out.Allowed() {
		s.forget(req.Rule.Prefix(), req.Key)
	}
}

// cacheable reports a request the cache may answer: of cost 1, under a
// rule, at a time a store decides at. The rest, bad input included, is the
// store's to decide or refuse (a request is validated once, by the store):
// a denial is only ever held for a request the store decided.
func cacheable(req *backend.Request) bool {
	return req.Cost == 1 && req.Rule != nil && req.Now >= 0 && req.Now <= backend.MaxMicros
}

// consider caches out, the store's answer to req (of cost 1) sent at sent
// and generation gen, if it is a denial that holds until its RetryAfter:
// the key at its limit or over it, on the store's own rule. Nothing frees
// quota for a request of cost 1 before its RetryAfter then, however far
// over the limit the key is; the answer holds until the count next drops
// (ResetAt: at the limit, when the request fits).
func (s *Store) consider(req *backend.Request, out backend.Outcome, sent time.Time, gen generation) {
	if out.Allowed() || out.Count < req.Rule.MaxCost() {
		return
	}
	c := denial{out: out, rule: req.Rule, caller: req.Now != 0, sent: sent,
		until: min(out.RetryAfter, out.ResetAt-out.At), retry: out.RetryAfter}
	if c.until <= 0 {
		return
	}
	if c.caller {
		c.until, c.retry = out.At+c.until, out.At+c.retry
	}
	s.remember(slotOf(req), c, gen)
}

// remember caches c, a denial of k whose request was sent at generation
// gen, unless a change to k was made or heard since: the change may have
// come after the store decided, and the denial be obsolete already. A
// change counts before it forgets (forget, changed), so one that lands
// between the check and the Add is seen by the second check.
func (s *Store) remember(k slot, c denial, gen generation) {
	if s.generation(k.key) != gen {
		return
	}
	s.put(k, c)
	if s.generation(k.key) != gen {
		s.cache.Remove(k)
	}
}

// answer is the cached denial as of req, if it still holds.
func (c *denial) answer(req *backend.Request) (backend.Outcome, bool) {
	if c.rule != req.Rule || c.caller != (req.Now != 0) {
		return backend.Outcome{}, false
	}
	out := c.out
	var now int64 // on the cached times' scale
	if c.caller {
		if req.Now < c.out.At {
			return backend.Outcome{}, false // a caller's clock before the denial: the store's to say
		}
		now, out.At = req.Now, req.Now
	} else {
		now = time.Since(c.sent).Microseconds()
		out.At = c.out.At + now
	}
	if now >= c.until {
		return backend.Outcome{}, false // over: the store's to say
	}
	out.RetryAfter = c.retry - now
	return out, true
}

// Peek implements backend.Store: a request of cost 1 on a key with a cached
// denial is answered here, as Take's (a denial records nothing: the peek
// and the take say the same); anything else is the store's.
func (s *Store) Peek(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	if out, ok := s.lookup(&req); ok {
		s.hits.Add(1)
		return out, nil
	}
	return s.next.Peek(ctx, req)
}

// lookup is req's cached denial, if the cache may answer req and holds one
// that still does.
func (s *Store) lookup(req *backend.Request) (backend.Outcome, bool) {
	if !cacheable(req) || !s.trusted() {
		return backend.Outcome{}, false
	}
	c, ok := s.get(slotOf(req))
	if !ok {
		return backend.Outcome{}, false
	}
	return c.answer(req)
}

// Reset implements backend.Store: the key's cached denials go, then the
// store forgets it.
func (s *Store) Reset(ctx context.Context, prefix, key string) error {
	s.forget(prefix, key)
	defer s.forget(prefix, key) // a denial decided before the Reset may arrive until it returns
	return s.next.Reset(ctx, prefix, key)
}

// forget counts a change to key and drops its cached denials.
func (s *Store) forget(prefix, key string) {
	s.stripe(key).Add(1)
	for _, alg := range backend.Algorithms() {
		s.cache.Remove(slot{prefix, key, alg})
	}
}

// Refund implements backend.Store: the key's cached denials go, then the
// store refunds (errors.ErrUnsupported if it cannot).
func (s *Store) Refund(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	if req.Rule != nil {
		s.forget(req.Rule.Prefix(), req.Key)
		defer s.forget(req.Rule.Prefix(), req.Key) // as Reset
	}
	return s.next.Refund(ctx, req)
}

// Charge implements backend.Store: the key's cached denials go (still
// denials, their counts and waits are no longer exact), then the store
// records the usage (errors.ErrUnsupported if it cannot).
func (s *Store) Charge(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	if req.Rule != nil {
		s.forget(req.Rule.Prefix(), req.Key)
		defer s.forget(req.Rule.Prefix(), req.Key) // as Reset
	}
	return s.next.Charge(ctx, req)
}

// Acquire implements backend.Store: the store's (permits are never cached).
func (s *Store) Acquire(ctx context.Context, req backend.Request, id int64) (backend.Outcome, error) {
	return s.next.Acquire(ctx, req, id)
}

// Release implements backend.Store: the store's.
func (s *Store) Release(ctx context.Context, req backend.Request, id int64) (backend.Outcome, error) {
	return s.next.Release(ctx, req, id)
}

// Info implements backend.Store: the store's (in process if it is, its
// nodes, its changes), so that a layer over the cache (a guard keeping a
// breaker per node, another cache) sees what it would over the store.
func (s *Store) Info() backend.Info { return s.info }

// Hits is how many requests the cache answered, and Misses how many of cost
// 1 it passed to the store, since New.
func (s *Store) Hits() uint64 { return s.hits.Load() }

// Misses: see Hits.
func (s *Store) Misses() uint64 { return s.misses.Load() }

// Len is the number of keys with a cached denial (some may have ended).
func (s *Store) Len() int { return s.cache.Len() }
