// Package redis is the backend.Store on Redis (or any server speaking its
// protocol and Lua), through github.com/redis/go-redis/v9.
//
// Each decision is one Lua script (shared with the Valkey backend): one
// round trip, atomic on the server, so any number of app instances sharing
// the server enforce one limit. On Redis 7 (and Valkey) it is an FCALL of
// the function of the request's algorithm, from a library the store loads
// with FUNCTION LOAD the first time the server answers that it has no such
// function (after a restart or a FUNCTION FLUSH too), in the same call; on
// an older server, or one whose ACL forbids the client functions, an
// EVALSHA, and after NOSCRIPT the script itself (EVAL).
// Reset is one DEL. Several policies on one caller's key are decided
// together by one script (TakeAll, EVALSHA).
//
// Keys look like "ratelimit:{user42}:sw" (the log), with the caller's key as
// the Cluster hash tag, so all the keys of one caller's key are in one slot;
// every write leaves a TTL of at least the window plus a second (the sliding
// log renews it about once a second, not at every write), so idle keys
// disappear by themselves. docs/keys.md describes every key.
//
// A panic of the client is returned as an error wrapping backend.ErrStore.
//
// # Deadlines
//
// go-redis honours a context's deadline only on a client built with
// ContextTimeoutEnabled: true; give the store such a client. On any other
// client, the store itself returns when the context is done (the command then
// finishes in the background, at the cost of a goroutine per call). Either way
// a call that timed out may still have been decided on the server.
//
// A decision is never sent twice: go-redis resends a command whose
// connection broke or whose reply timed out, which would count a request
// twice, but a decision's command tells it not to once written (a
// connection that broke before the write is still retried). A call whose
// reply was lost fails, though the server may have counted it.
//
// # Clock
//
// By default a decision is made at the server's time, so app instances
// whose clocks disagree still share one window: the store reads TIME about
// once a second and sends each decision the server's time as that reading
// and the process's monotonic clock place it (within 5 ms), sparing each
// script a TIME; a permit's script reads TIME itself, as does every script
// until the first reading (see rediscore's clock.go). ratelimit.WithCallerClock sends the client's time
// instead: deterministic (tests), but then the instances' clocks must agree,
// or the window of each is shifted by its skew.
package redis

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/rediscore"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
)

// Client is what the store needs of a go-redis client; redis.Client,
// redis.ClusterClient, redis.Ring and a failover client all have it, as does
// redis.UniversalClient. The store sends its FCALL or EVALSHA (and EVAL
// after a NOSCRIPT) as commands of its own through Process: their arguments
// and reply are built and read without an allocation per value.
type Client interface {
	Process(ctx context.Context, cmd goredis.Cmder) error
	Del(ctx context.Context, keys ...string) *goredis.IntCmd
}

// name begins every error of the store.
const name = "ratelimit/redis"

// Store is the Redis backend.Store: the shared Redis-protocol core
// (rediscore.Store) over go-redis (conn). It holds no state of its own but a
// cluster's layout, and does not own the client: close the client when
// done. It is the whole backend.Store: Take, Peek, Charge, Refund,
// Acquire, Release, TakeAll and Reset, each one FCALL (or EVALSHA), the
// engine's own methods; Charge, Refund and Reset then PUBLISH the change
// on the channel of changes (see Info).
type Store struct {
	core // every operation of the contract but Info, one script each
	c    *conn
	// layoutKnown says the cluster client has loaded the cluster's layout,
	// so that its masterFor answers without I/O; layoutLoading, that a
	// lookup in the background is loading it (see Node).
	layoutKnown, layoutLoading atomic.Bool
}

// Store is a whole store: every operation of the contract.
var _ backend.Store = (*Store)(nil)

// New returns a Store deciding on client's server. A nil client, or an
// option out of its bounds (WithReplicaAck), is an error wrapping
// backend.ErrInvalidArgument.
func New(client Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%s: %w: nil client", name, backend.ErrInvalidArgument)
	}
	c := &conn{
		client:         client,
		honoursContext: contextTimeoutEnabled(client),
		readTimeout:    readTimeout(client),
		args:           lua.NewArgs(func(n int64) any { return n }, func(s string) any { return s }),
	}
	if r, ok := client.(interface{ ReloadState(context.Context) }); ok {
		c.reload = r.ReloadState
	}
	if cc, ok := client.(*goredis.ClusterClient); ok {
		c.masterFor = cc.MasterForKey
	}
	_, single := client.(*goredis.Client) // a failover client is one too
	c.routed = !single
	for _, o := range opts {
		o(c)
	}
	if c.ackReplicas < 0 || (c.ackReplicas > 0 && c.ackTimeout < time.Millisecond) {
		return nil, fmt.Errorf("%s: %w: WithReplicaAck(%d, %v): want at least 1 replica and 1ms",
			name, backend.ErrInvalidArgument, c.ackReplicas, c.ackTimeout)
	}
	if err := c.startPipeline(client); err != nil {
		return nil, err
	}
	return &Store{c: c, core: core{Name: name, Client: c, Acked: c.ackReplicas > 0, OneServer: !c.routed}}, nil
}

// Info implements backend.Store. On a cluster client, its Node is the
// address of the master of the key's slot, as the client's layout says (a
// lookup in its cached layout, no round trip), "" while the client does
// not know the layout: go-redis loads it on the first lookup and waits for
// it (up to its read timeout per node, whatever the caller's budget), so
// that first lookup runs in the background and Node never waits on I/O.
// Once loaded, go-redis keeps a layout (it refreshes it in the
// background). Its Changes are a subscription to the server's channel of
// changes (see changes).
func (s *Store) Info() backend.Info {
	info := backend.Info{Changes: s.changes, Blocks: true}
	if s.c.masterFor != nil {
		info.Node = s.node
	}
	return info
}

// node is Info's Node on a cluster client.
func (s *Store) node(prefix, key string) string {
	if !s.layoutKnown.Load() {
		if s.layoutLoading.CompareAndSwap(false, true) {
			go s.loadLayout(lua.Tag(key))
		}
		return ""
	}
	c, err := s.c.masterFor(context.Background(), lua.Tag(key))
	if err != nil {
		return ""
	}
	return c.Options().Addr
}

// loadLayout looks tag's master up, which makes the cluster client load the
// layout, and says so when it did.
func (s *Store) loadLayout(tag string) {
	defer s.layoutLoading.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), s.c.readTimeout+time.Second)
	defer cancel()
	if _, err := s.c.masterFor(ctx, tag); err == nil {
		s.layoutKnown.Store(true)
	}
}

func contextTimeoutEnabled(client Client) bool {
	enabled, _ := options(client)
	return enabled
}

// readTimeout is how long the client waits for a reply (go-redis: 3s unless
// set; 0 for none or unknown).
func readTimeout(client Client) time.Duration {
	_, d := options(client)
	switch {
	case d == 0:
		return 3 * time.Second // go-redis's default
	case d < 0:
		return 0 // no read timeout: go-redis cannot retry on one
	}
	return d
}

func options(client Client) (contextTimeout bool, readTimeout time.Duration) {
	switch c := client.(type) {
	case interface{ Options() *goredis.Options }: // Client, failover client
		return c.Options().ContextTimeoutEnabled, c.Options().ReadTimeout
	case interface {
		Options() *goredis.ClusterOptions
	}:
		return c.Options().ContextTimeoutEnabled, c.Options().ReadTimeout
	case interface{ Options() *goredis.RingOptions }:
		return c.Options().ContextTimeoutEnabled, c.Options().ReadTimeout
	}
	return false, 0
}

// core is the Redis-protocol engine, embedded: its methods are Store's.
type core = rediscore.Store
