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
// Reset is one DEL. The Store is a backend.MultiStore: several policies on
// one caller's key are decided by one script (EVALSHA).
//
// Keys look like "ratelimit:{user42}:sw" (the log), with the caller's key as
// the Cluster hash tag, so all the keys of one caller's key are in one slot;
// every write leaves a TTL of at least the window plus a second (the sliding
// log renews it about once a second, not at every write), so idle keys
// disappear by themselves. The layout is documented once, in internal/script/keys.go.
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
// A decision is never retried after a timeout: go-redis retries a command
// whose reply timed out, which would count a request twice, but not once the
// caller's context is done, and the store ends every call's context by the
// client's read timeout. (A connection that breaks after the server ran the
// script and before its reply, in a crash or a failover, is still retried by
// go-redis: that instant is the one case where a request can count twice.)
//
// # Clock
//
// By default the script reads the server's clock (TIME), so app instances
// whose clocks disagree still share one window. ratelimit.WithCallerClock sends the
// client's time instead: deterministic (tests), but then the instances'
// clocks must agree, or the window of each is shifted by its skew.
package redis

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/script"
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

// Store is the Redis backend.Store. It holds no state of its own and does
// not own the client: close the client when done.
type Store struct {
	client Client
	// honoursContext: the client stops waiting for the server when the
	// context is done (ContextTimeoutEnabled).
	honoursContext bool
	// readTimeout is the client's: a call must end by then (see capped).
	readTimeout time.Duration
	// args formats the scripts' arguments as go-redis takes them: numbers
	// boxed once per policy (go-redis formats them), a cost up to 255 boxed
	// without allocating.
	args *script.ArgCache[any]
	// reload asks a cluster client to re-read the cluster's layout (nil for
	// other clients); see failed.
	reload func(context.Context)
	// routed: the client routes a command by its first key (a cluster or a
	// ring), which go-redis reads only from a string. A key is otherwise
	// sent as a *string, which go-redis writes as the string and which
	// costs no allocation in an interface, where a string costs one.
	routed bool
	// masterFor names the master of a key's slot on a cluster client (nil
	// for other clients); see Node. layoutKnown says the client has loaded
	// the cluster's layout, so that masterFor answers without I/O;
	// layoutLoading, that a lookup in the background is loading it.
	masterFor                  func(ctx context.Context, key string) (*goredis.Client, error)
	layoutKnown, layoutLoading atomic.Bool
	// ackReplicas, if not 0, is how many replicas must acknowledge every
	// write within ackTimeout (WithReplicaAck).
	ackReplicas int
	ackTimeout  time.Duration
	// noFunctions: the server has no functions, or the client cannot load
	// them where it calls them; the store runs EVALSHA (see functions.go).
	noFunctions atomic.Bool
}

// New returns a Store deciding on client's server. A nil client, or an
// option out of its bounds (WithReplicaAck), is an error wrapping
// backend.ErrInvalidArgument.
func New(client Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("ratelimit/redis: %w: nil client", backend.ErrInvalidArgument)
	}
	s := &Store{
		client:         client,
		honoursContext: contextTimeoutEnabled(client),
		readTimeout:    readTimeout(client),
	}
	if c, ok := client.(interface{ ReloadState(context.Context) }); ok {
		s.reload = c.ReloadState
	}
	if c, ok := client.(*goredis.ClusterClient); ok {
		s.masterFor = c.MasterForKey
	}
	_, single := client.(*goredis.Client) // a failover client is one too
	s.routed = !single
	for _, o := range opts {
		o(s)
	}
	if s.ackReplicas < 0 || (s.ackReplicas > 0 && s.ackTimeout < time.Millisecond) {
		return nil, fmt.Errorf("ratelimit/redis: %w: WithReplicaAck(%d, %v): want at least 1 replica and 1ms",
			backend.ErrInvalidArgument, s.ackReplicas, s.ackTimeout)
	}
	s.args = script.NewArgs(func(n int64) any { return n }, func(s string) any { return s })
	return s, nil
}

// Node implements backend.ShardedStore on a cluster client: the address of
// the master of the key's slot, as the client's layout says (a lookup in
// its cached layout, no round trip). It is "" for other clients, and while
// the client does not know the layout: go-redis loads it on the first
// lookup and waits for it (up to its read timeout per node, whatever the
// caller's budget), so that first lookup runs in the background and Node
// never waits on I/O. Once loaded, go-redis keeps a layout (it refreshes
// it in the background).
func (s *Store) Node(prefix, key string) string {
	if s.masterFor == nil {
		return ""
	}
	if !s.layoutKnown.Load() {
		if s.layoutLoading.CompareAndSwap(false, true) {
			go s.loadLayout(script.Tag(key))
		}
		return ""
	}
	c, err := s.masterFor(context.Background(), script.Tag(key))
	if err != nil {
		return ""
	}
	return c.Options().Addr
}

// loadLayout looks tag's master up, which makes the cluster client load the
// layout, and says so when it did.
func (s *Store) loadLayout(tag string) {
	defer s.layoutLoading.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), s.readTimeout+time.Second)
	defer cancel()
	if _, err := s.masterFor(ctx, tag); err == nil {
		s.layoutKnown.Store(true)
	}
}

// failed is told of every error. A cluster client re-reads the cluster's
// layout only every 10 seconds or on a MOVED reply, and a master that died
// answers neither: its keys would keep failing long after its replica took
// over. On any error, a cluster client is asked to reload the layout (in
// the background, at most every 200ms: go-redis's own cool-down), so that
// the keys follow their slots to the new master within moments of the
// failover.
func (s *Store) failed(err error) {
	if err != nil && s.reload != nil {
		s.reload(context.Background())
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

// capped ends ctx no later than the client's read timeout. go-redis retries
// a command whose reply timed out, but first waits on the caller's context:
// a context that is done by then stops the retry. A decision is not
// idempotent (the server may have recorded the first attempt), so it must
// never be retried; the Limiter's time budget (100ms by default) is already
// shorter than go-redis's read timeout, and this covers a longer one.
func (s *Store) capped(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.readTimeout <= 0 {
		return ctx, func() {}
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < s.readTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.readTimeout)
}

// Take implements backend.Store: one FCALL (or EVALSHA).
func (s *Store) Take(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.decide(ctx, req, script.Take)
}

// Peek implements backend.Store: one FCALL (or EVALSHA) that writes nothing.
func (s *Store) Peek(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.decide(ctx, req, script.Peek)
}

// Refund implements backend.RefundStore: one FCALL (or EVALSHA), then a PUBLISH on
// the channel of changes (see Invalidations).
func (s *Store) Refund(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	out, err := s.decide(ctx, req, script.Refund)
	if err == nil {
		s.changedKey(ctx, req.Rule.Prefix(), req.Key)
	}
	return out, err
}

func (s *Store) decide(ctx context.Context, req backend.Request, op script.Op) (out backend.Outcome, err error) {
	defer script.Recover("ratelimit/redis", &err)
	if err := req.Validate(); err != nil {
		return backend.Outcome{}, fmt.Errorf("ratelimit/redis: %w", err)
	}
	c := new(call) // the command, its words and its keys: one allocation
	keys := script.AppendKeys(c.keys[:0], req)
	words := append(c.words[:0], evalsha, shas[req.Rule.Algorithm()], len(keys))
	for i := range keys {
		if i == 0 && s.routed {
			words = append(words, keys[0]) // an allocation: see routed
		} else {
			words = append(words, &keys[i]) // a pointer in an interface: none
		}
	}
	var reply []int64
	if s.ackReplicas > 0 && op != script.Peek {
		reply, err = s.runAcked(ctx, &c.cmd, s.args.AppendFor(words, req, op), req.Key)
	} else {
		reply, err = s.run(ctx, &c.cmd, s.args.AppendFor(words, req, op), int(req.Rule.Algorithm()), req.Key)
	}
	if err == nil {
		out, err = script.Outcome(reply)
	}
	if err != nil {
		return backend.Outcome{}, fmt.Errorf("ratelimit/redis: %w", script.WithContext(ctx, err))
	}
	return out, nil
}

// call is one decision's FCALL or EVALSHA: the command, its words, and its
// key, which the words point to. Its room for a second key and a word more
// is kept: without it a sliding log's decision allocated once more
// (TestAllocationsPerDecision).
type call struct {
	cmd   goredis.IntSliceCmd
	words [3 + 2 + script.MaxArgs]any
	keys  [2]string
}

// The words of an EVALSHA (the script of each algorithm, and the one of
// TakeAll), and of the EVAL that replaces it after NOSCRIPT, boxed once.
var (
	evalsha, eval any = "evalsha", "eval"
	shas              = func() (b [4]any) {
		for alg := range b {
			b[alg] = script.For(backend.Algorithm(alg)).SHA1
		}
		return b
	}()
	allSHA any = script.All.SHA1
)

// noScript turns words, an EVALSHA the server did not know, into the EVAL
// of the same script.
func noScript(words []any) {
	words[0], words[1] = eval, script.Text(words[1].(string))
}

// Reset implements backend.Store: one DEL of the key's state under every
// algorithm, then a PUBLISH on the channel of changes (see Invalidations).
func (s *Store) Reset(ctx context.Context, prefix, key string) (err error) {
	defer script.Recover("ratelimit/redis", &err)
	keys := script.AllKeys(prefix, key)
	cctx, cancel := s.capped(ctx)
	defer cancel()
	_, err = script.Bounded(cctx, "ratelimit/redis", s.honoursContext, func(ctx context.Context) (int64, error) {
		if s.ackReplicas > 0 {
			return 0, s.deleteAcked(ctx, keys, key)
		}
		return s.client.Del(ctx, keys...).Result()
	})
	if err != nil {
		return fmt.Errorf("ratelimit/redis: %w", err)
	}
	s.changedKey(ctx, prefix, key)
	return nil
}

// run sends words (an EVALSHA of the script of alg, -1 for All) as cmd: see
// script. After NOSCRIPT (a restart, a SCRIPT FLUSH) it sends the script
// itself (EVAL).
func (s *Store) run(ctx context.Context, cmd *goredis.IntSliceCmd, words []any, alg int, key string) (reply []int64, err error) {
	ctx, cancel := s.capped(ctx)
	defer cancel()
	if s.honoursContext { // the hot path: no closure
		reply, err = s.script(ctx, cmd, words, alg, key)
	} else {
		reply, err = script.Bounded(ctx, "ratelimit/redis", false, func(ctx context.Context) ([]int64, error) {
			return s.script(ctx, cmd, words, alg, key)
		})
	}
	s.failed(err)
	return reply, err
}

// runAcked is run for a write that the replicas must acknowledge (see
// WithReplicaAck).
func (s *Store) runAcked(ctx context.Context, cmd *goredis.IntSliceCmd, words []any, key string) (reply []int64, err error) {
	ctx, cancel := s.capped(ctx)
	defer cancel()
	reply, err = script.Bounded(ctx, "ratelimit/redis", s.honoursContext, func(ctx context.Context) ([]int64, error) {
		return s.acked(ctx, cmd, words, key)
	})
	s.failed(err)
	return reply, err
}

func (s *Store) evalSHA(ctx context.Context, cmd *goredis.IntSliceCmd, words []any) ([]int64, error) {
	*cmd = *goredis.NewIntSliceCmd(ctx, words...)
	cmd.SetFirstKeyPos(3) // for a cluster client: the first key is the 4th word
	err := s.client.Process(ctx, cmd)
	if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		noScript(words)
		*cmd = *goredis.NewIntSliceCmd(ctx, words...)
		cmd.SetFirstKeyPos(3)
		err = s.client.Process(ctx, cmd)
	}
	return cmd.Val(), err
}
