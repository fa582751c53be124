package memory

import (
	"unique"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/keyhash"
)

// What the external tests (package memory_test, which import package
// ratelimit: package ratelimit imports this one) check of the store's
// insides.

// ShardOf is the index of the shard holding the state of key under prefix
// and alg, and that shard's capacity in keys.
func (s *Store) ShardOf(prefix, key string, alg backend.Algorithm) (shard uint64, capacity int) {
	shard = (keyhash.String(s.seed, key) ^ namespace(prefix, alg)) & s.mask
	return shard, s.shards[shard].capacity
}

// Shards is the number of shards.
func (s *Store) Shards() int { return len(s.shards) }

// LogEntries is the number of entries the sliding log of key under prefix
// holds, or -1 when the store holds no such log.
func (s *Store) LogEntries(prefix, key string) int {
	h := keyhash.String(s.seed, key) ^ namespace(prefix, backend.SlidingWindow)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, r := sh.log.find(h, key, unique.Make(scope{prefix, backend.SlidingWindow}))
	if r == nil {
		return -1
	}
	return r.st.Len()
}

// ShardEntries are the log entries each shard holds, and each one's bound.
func (s *Store) ShardEntries() (entries, bounds []int) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		entries, bounds = append(entries, sh.entries), append(bounds, sh.maxEntries)
		sh.mu.Unlock()
	}
	return entries, bounds
}

// Denying reports whether the state of key under prefix and alg is
// published, for Takes decided without the shard's lock (see denials).
func (s *Store) Denying(prefix, key string, alg backend.Algorithm) bool {
	h := keyhash.String(s.seed, key) ^ namespace(prefix, alg)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sc := unique.Make(scope{prefix, alg})
	switch alg {
	case backend.GCRA:
		return published(&sh.gcra, h, key, sc)
	case backend.FixedWindow:
		return published(&sh.fixed, h, key, sc)
	case backend.SlidingWindowCounter:
		return published(&sh.counter, h, key, sc)
	case backend.SlidingWindow:
		return published(&sh.log, h, key, sc)
	}
	return false
}

func published[S any](t *table[S], h uint64, key string, sc unique.Handle[scope]) bool {
	_, r := t.find(h, key, sc)
	return r != nil && r.published && t.den.find(tagOf(h), key, sc) != nil
}

// LockShard locks the shard holding key under prefix and alg until unlock
// is called.
func (s *Store) LockShard(prefix, key string, alg backend.Algorithm) (unlock func()) {
	sh := &s.shards[(keyhash.String(s.seed, key)^namespace(prefix, alg))&s.mask]
	sh.mu.Lock()
	return sh.mu.Unlock
}
