package guard

import (
	"errors"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
)

// Option configures a Store.
type Option func(*config)

type config struct {
	name          string
	failures      int
	coolDown      time.Duration
	fallback      backend.Store
	instances     int
	share         func(limit, burst int64) (int64, int64)
	onStateChange func(name string, from, to State)
	err           error
}

// WithName names the store in state changes (default "guard").
func WithName(name string) Option { return func(c *config) { c.name = name } }

// WithFailures sets how many calls must fail in a row to open the breaker
// (default DefaultFailures); at least 1.
func WithFailures(n int) Option { return func(c *config) { c.failures = n } }

// WithCoolDown sets how long the breaker stays open before a probe (default
// DefaultCoolDown); positive.
func WithCoolDown(d time.Duration) Option { return func(c *config) { c.coolDown = d } }

// WithFallback makes local (an in-process store, such as a memory.Store)
// decide while the primary cannot, under Limit/instances of each policy (at
// least 1), for a limit that instances app instances share. local must not
// be nil and instances must be at least 1.
func WithFallback(local backend.Store, instances int) Option {
	return func(c *config) {
		switch {
		case local == nil:
			c.err = errors.Join(c.err, fmt.Errorf("ratelimit/guard: %w: nil fallback store", backend.ErrInvalidArgument))
		case instances < 1:
			c.err = errors.Join(c.err, fmt.Errorf("ratelimit/guard: %w: %d instances share the limit, want at least 1", backend.ErrInvalidArgument, instances))
		}
		c.fallback, c.instances = local, instances
	}
}

// WithLocalShare replaces the share of WithFallback: for a request under a
// rule of limit and burst (burst 0 but for GCRA), the fallback decides under
// the same algorithm and window with the limit and burst share returns. A
// share out of bounds (see backend.NewRule) makes the call fail with an
// error wrapping backend.ErrInvalidPolicy.
func WithLocalShare(share func(limit, burst int64) (localLimit, localBurst int64)) Option {
	return func(c *config) { c.share = share }
}

// WithStateObserver calls f on every change of a breaker's state, with the
// store's name (promlimit's Observer has such a method), followed on a
// cluster by " " and the node's address for a node's breaker. It runs under the
// breaker's lock: it must be quick and must not call the store.
func WithStateObserver(f func(name string, from, to State)) Option {
	return func(c *config) { c.onStateChange = f }
}
