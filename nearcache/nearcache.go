// Package nearcache remembers denials near the caller, so that a flood from
// one abusive key costs no round trip per request: a layer over any
// ratelimit.Store.
//
// When the store denies a key a request of cost 1 because the key is at its
// limit, the answer stays the same until the denial's RetryAfter passes:
// nothing frees quota before then (the oldest request leaves, the window
// ends, the counter or the bucket drops a request's worth exactly then),
// and every other instance is denied as well. The cache keeps such denials,
// per key and algorithm, and answers the key's requests of cost 1 itself
// until then, with the same Decision fields (RetryAfter counting down, At
// moving on), then asks the store again. It never admits: everything but
// those denials goes to the store (admissions, peeks, larger costs, keys
// over their limit after a policy was lowered). It never denies longer
// than the store would, but for what it cannot see: a policy change makes
// it ask the store (a cached denial is only used under the policy that made
// it), and Reset and Refund through this Store clear the key, but a Reset or
// a Refund made through another instance is seen only when the cached
// denial ends.
//
// On the store's clock, a server's, the cache counts the retry-after on the
// local monotonic clock from the moment the request was sent, so it asks
// again no later than the server would admit. The cache holds at most
// size keys (github.com/hashicorp/golang-lru/v2), the least recently used
// leaving first.
package nearcache

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/ratelimit-go/ratelimit"
)

// DefaultSize is the number of keys a cache holds unless New is told
// otherwise: about 200 bytes each.
const DefaultSize = 10_000

// Store is a ratelimit.Store answering cached denials itself and asking the
// store it wraps for everything else. It is a ratelimit.MultiStore, a
// RefundStore and an InProcessStore when the wrapped store is.
type Store struct {
	next   ratelimit.Store
	cache  *lru.Cache[slot, denial]
	hits   atomic.Uint64
	misses atomic.Uint64
}

// slot names a key's state under one algorithm.
type slot struct {
	key ratelimit.Key
	alg ratelimit.Algorithm
}

// denial is a cached denial: the decision, the policy and clock that made
// it, and when it ends.
type denial struct {
	d      ratelimit.Decision
	policy ratelimit.Policy
	clock  ratelimit.Clock
	// On the caller's clock, until is on it; on the store's, it is on the
	// local monotonic clock, from sent, when the request went out.
	until time.Time
	sent  time.Time
}

// New returns a Store over next caching at most size denials (DefaultSize
// when size is 0).
func New(next ratelimit.Store, size int) (*Store, error) {
	if next == nil {
		return nil, fmt.Errorf("%w: nil store", ratelimit.ErrInvalidArgument)
	}
	if size == 0 {
		size = DefaultSize
	}
	if size < 0 {
		return nil, fmt.Errorf("%w: cache size %d", ratelimit.ErrInvalidArgument, size)
	}
	cache, err := lru.New[slot, denial](size)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ratelimit.ErrInvalidArgument, err)
	}
	return &Store{next: next, cache: cache}, nil
}

// Take implements ratelimit.Store: a request of cost 1 on a key with a
// cached denial is denied here; anything else is the store's.
func (s *Store) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	if req.Cost != 1 || req.Validate() != nil { // bad input is the store's to refuse
		return s.next.Take(ctx, req)
	}
	k := slot{req.Key, req.Policy.Algorithm}
	if c, ok := s.cache.Get(k); ok {
		if d, ok := c.answer(req); ok {
			s.hits.Add(1)
			return d, nil
		}
		s.cache.Remove(k)
	}
	s.misses.Add(1)
	sent := time.Now()
	d, err := s.next.Take(ctx, req)
	if err == nil && !d.Allowed && d.Count == d.Limit && d.RetryAfter > 0 && d.Source == ratelimit.SourceStore {
		c := denial{d: d, policy: req.Policy, clock: req.Clock, sent: sent}
		if req.Clock == ratelimit.CallerClock {
			c.until = d.At.Add(d.RetryAfter)
		} else {
			c.until = sent.Add(d.RetryAfter)
		}
		s.cache.Add(k, c)
	}
	return d, err
}

// answer is the cached denial as of req, if it still holds.
func (c denial) answer(req ratelimit.Request) (ratelimit.Decision, bool) {
	if c.policy != req.Policy || c.clock != req.Clock {
		return ratelimit.Decision{}, false
	}
	d := c.d
	if req.Clock == ratelimit.CallerClock {
		d.At = req.Now
	} else {
		now := time.Now()
		d.At = c.d.At.Add(now.Sub(c.sent))
		req.Now = now
	}
	left := c.until.Sub(req.Now)
	if left <= 0 || req.Now.Before(c.d.At) && req.Clock == ratelimit.CallerClock {
		return ratelimit.Decision{}, false // over, or a caller's clock before the denial: the store's to say
	}
	d.RetryAfter = left
	return d, true
}

// Peek implements ratelimit.Store: the store's answer.
func (s *Store) Peek(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return s.next.Peek(ctx, req)
}

// Reset implements ratelimit.Store: the key's cached denials go, then the
// store forgets it.
func (s *Store) Reset(ctx context.Context, key ratelimit.Key) error {
	s.forget(key)
	return s.next.Reset(ctx, key)
}

func (s *Store) forget(key ratelimit.Key) {
	for _, alg := range ratelimit.Algorithms() {
		s.cache.Remove(slot{key, alg})
	}
}

// Refund implements ratelimit.RefundStore: the key's cached denials go,
// then the store refunds (errors.ErrUnsupported if it cannot).
func (s *Store) Refund(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	s.forget(req.Key)
	rs, ok := s.next.(ratelimit.RefundStore)
	if !ok {
		return ratelimit.Decision{}, fmt.Errorf("nearcache: %T cannot refund: %w", s.next, errors.ErrUnsupported)
	}
	return rs.Refund(ctx, req)
}

// TakeAll implements ratelimit.MultiStore: the store's answer (or
// errors.ErrUnsupported if it is no MultiStore).
func (s *Store) TakeAll(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	ms, ok := s.next.(ratelimit.MultiStore)
	if !ok {
		return nil, fmt.Errorf("nearcache: %T cannot decide several requests together: %w", s.next, errors.ErrUnsupported)
	}
	return ms.TakeAll(ctx, reqs)
}

// InProcess implements ratelimit.InProcessStore: as the store is.
func (s *Store) InProcess() bool {
	ip, ok := s.next.(ratelimit.InProcessStore)
	return ok && ip.InProcess()
}

// Hits is how many requests the cache answered, and Misses how many of cost
// 1 it passed to the store, since New.
func (s *Store) Hits() uint64 { return s.hits.Load() }

// Misses: see Hits.
func (s *Store) Misses() uint64 { return s.misses.Load() }

// Len is the number of keys with a cached denial (some may have ended).
func (s *Store) Len() int { return s.cache.Len() }
