// Package script holds the Lua scripts that make each decision on a Redis
// protocol server, the one copy shared by the Redis and Valkey backends, and
// the Go side of their calling convention: keys, arguments, reply.
package script

import (
	_ "embed"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/algorithm"
)

var (
	//go:embed prelude.lua
	prelude string
	//go:embed sliding.lua
	sliding string
	//go:embed fixed.lua
	fixed string

	// Sliding decides a sliding-window request: prelude.lua, then sliding.lua.
	Sliding = prelude + sliding
	// Fixed decides a fixed-window request: prelude.lua, then fixed.lua.
	Fixed = prelude + fixed
)

// TTLSlack is how much longer than the window a key lives after its last
// write (on top of the window), as a safety net: state that nobody uses
// disappears by itself.
const TTLSlack = 1000 // ms

// Source is the script deciding requests under alg.
func Source(alg ratelimit.Algorithm) string {
	if alg == ratelimit.FixedWindow {
		return Fixed
	}
	return Sliding
}

// Keys are the server keys of req's state; they share one hash tag, so one
// script may touch them all on a cluster.
func Keys(req ratelimit.Request) []string {
	if req.Policy.Algorithm == ratelimit.FixedWindow {
		return []string{req.StoreKey()}
	}
	// One allocation for both: the log's name is a prefix of the counter's.
	seq := req.StoreKey() + seqSuffix
	return []string{seq[:len(seq)-len(seqSuffix)], seq}
}

const seqSuffix = ":seq"

// Args are the script's arguments for req, as strings: limit, window (µs),
// cost, now (µs, or "" for the server's clock), TTL slack (ms).
func Args(req ratelimit.Request) []string { return NewStringArgs().For(req) }

// NewStringArgs is an ArgCache of the arguments as strings.
func NewStringArgs() *ArgCache[string] {
	return NewArgs(func(n int64) string { return strconv.FormatInt(n, 10) }, "")
}

// ArgCache builds the scripts' arguments in a client's own type (string for
// valkey-go, any for go-redis), formatting what depends only on the policy
// once per policy rather than once per decision. Safe for concurrent use.
type ArgCache[T any] struct {
	format      func(int64) T
	serverClock T // the "now" that asks for the server's TIME
	slack       T
	last        atomic.Pointer[policyArgs[T]]
}

type policyArgs[T any] struct {
	policy        ratelimit.Policy
	limit, window T
}

// NewArgs returns an ArgCache formatting numbers with format, and sending
// serverClock as the time of a request that carries none.
func NewArgs[T any](format func(int64) T, serverClock T) *ArgCache[T] {
	return &ArgCache[T]{format: format, serverClock: serverClock, slack: format(TTLSlack)}
}

// For returns the arguments of req (see Args).
func (c *ArgCache[T]) For(req ratelimit.Request) []T {
	pa := c.last.Load()
	if pa == nil || pa.policy != req.Policy {
		pa = &policyArgs[T]{policy: req.Policy, limit: c.format(int64(req.Policy.Limit)), window: c.format(algorithm.WindowMicros(req.Policy))}
		c.last.Store(pa)
	}
	now := c.serverClock
	if !req.Now.IsZero() {
		now = c.format(algorithm.Micros(req.Now))
	}
	return []T{pa.limit, pa.window, c.format(int64(req.Cost)), now, c.slack}
}

// Decision reads the script's reply for a request under limit.
func Decision(reply []int64, limit int) (ratelimit.Decision, error) {
	if len(reply) != 5 {
		return ratelimit.Decision{}, fmt.Errorf("unexpected script reply %v", reply)
	}
	out := algorithm.Outcome{Allowed: reply[0] == 1, Count: int(reply[1]), ResetAt: reply[2], RetryAfter: reply[3], At: reply[4]}
	return out.Decision(limit), nil
}
