package nearcache

import "sync/atomic"

// The LRU is read on every request of a flood and written only when a
// denial is learned, ends or is changed. golang-lru's Get moves the key to
// the front under the cache's one write lock, which a flood's goroutines
// then take turns on (two goroutines deciding three cached denials each
// took longer a call than one); its Peek reads under the read lock and
// moves nothing. A hit is read with Peek, and the key moved with Get only
// when it may be drifting towards the back.

// cached is a denial as the LRU holds it: moved is the count of the
// store's moves when its key last went to the LRU's front.
type cached struct {
	denial
	moved atomic.Uint64
}

// get is k's cached denial. A key leaves for want of room only from the
// LRU's back, once size other keys went to its front after it did: get
// moves k there (a Get, counted) when size/2 others did, so that a key
// asked for at least once every size/2 moves never leaves for want of
// room, as under a Get on every hit, while a flood's hits share the read
// lock.
func (s *Store) get(k slot) (*cached, bool) {
	c, ok := s.cache.Peek(k)
	if !ok {
		return nil, false
	}
	if s.moves.Load()-c.moved.Load() >= s.half {
		n := s.moves.Add(1) // counted before the move: moves made meanwhile count as after it
		s.cache.Get(k)
		c.moved.Store(n)
	}
	return c, true
}

// put caches d, a denial of k, at the LRU's front (a move, counted).
func (s *Store) put(k slot, d denial) {
	c := &cached{denial: d}
	c.moved.Store(s.moves.Add(1)) // as get's, before the move
	s.cache.Add(k, c)
}
