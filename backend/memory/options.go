package memory

import (
	"errors"
	"time"
)

// DefaultMaxKeys bounds the keys a Store holds unless WithMaxKeys says
// otherwise. A key counts once for each prefix and algorithm it is used
// under.
const DefaultMaxKeys = 100_000

// DefaultMaxEntries bounds the sliding-log entries a Store holds unless
// WithMaxEntries says otherwise: 8 bytes each (16 for a cost above 1).
const DefaultMaxEntries = 10_000_000

// DefaultSweepInterval is how often idle keys are dropped unless
// WithSweepInterval says otherwise.
const DefaultSweepInterval = time.Minute

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
// window, 8 bytes (16 for a cost above 1). The bound is split over the
// shards like WithMaxKeys'; a shard over it evicts its least recently used
// keys, never the one being decided.
func WithMaxEntries(n int) Option { return func(c *config) { c.maxEntries = n } }

// WhenFull says what a full store does with a new key.
type WhenFull uint8

const (
	// EvictLeastRecent (the default) makes room for the new key: a key
	// whose windows have all passed if the oldest ones include one, else
	// the oldest key used only once, else the least recently used key. An
	// evicted key inside its window forgets its history (it gets its full
	// quota again: ActiveEvictions counts these).
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

// WithStoreClock sets the store's own clock, which decides the requests
// without a time of their own (backend.Request.Now 0) and the sweeper's idea
// of now (default: the wall clock advanced by the monotonic clock, so a
// wall-clock step does not move windows).
func WithStoreClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

// WithSweepInterval sets how often keys whose window has passed are dropped
// (default DefaultSweepInterval); 0 or less disables the sweeper, leaving
// only the LRU bound.
func WithSweepInterval(d time.Duration) Option { return func(c *config) { c.sweepEvery = d } }

// WithShards sets the number of lock shards, rounded up to a power of two
// (default: 16 per CPU, at least 64).
func WithShards(n int) Option { return func(c *config) { c.shards = n } }
