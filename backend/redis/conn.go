package redis

import (
	"context"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/rediscore"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
)

// conn is rediscore.Client through a go-redis client.
type conn struct {
	client Client
	// honoursContext: the client stops waiting for the server when the
	// context is done (ContextTimeoutEnabled).
	honoursContext bool
	// readTimeout is the client's: a call must end by then (see capped).
	readTimeout time.Duration
	// args formats the scripts' arguments as go-redis takes them: numbers
	// boxed once per policy (go-redis formats them), a cost up to 255 boxed
	// without allocating.
	args *lua.ArgCache[any]
	// reload asks a cluster client to re-read the cluster's layout (nil for
	// other clients); see failed.
	reload func(context.Context)
	// routed: the client routes a command by its first key (a cluster or a
	// ring), which go-redis reads only from a string. A key is otherwise
	// sent as a *string, which go-redis writes as the string and which
	// costs no allocation in an interface, where a string costs one.
	routed bool
	// masterFor names the master of a key's slot on a cluster client (nil
	// for other clients); see Store.Node.
	masterFor func(ctx context.Context, key string) (*goredis.Client, error)
	// ackReplicas, if not 0, is how many replicas must acknowledge every
	// write within ackTimeout (WithReplicaAck).
	ackReplicas int
	ackTimeout  time.Duration
	// pipe, if not nil, is the client's auto-pipeliner, through which
	// decisions go (WithAutoPipeline asks for it: autoPipeline, with
	// autoOptions).
	pipe         *goredis.AutoPipeliner
	autoPipeline bool
	autoOptions  *goredis.AutoPipelineOptions
}

// Run implements rediscore.Client: req's FCALL or EVALSHA, with its words and
// keys in one allocation.
func (c *conn) Run(ctx context.Context, req backend.Request, op lua.Op, fcall, acked bool) (reply string, err error) {
	k := new(call)
	keys := lua.AppendKeys(k.keys[:0], req)
	alg := req.Rule.Algorithm()
	words := append(k.words[:0], evalsha, shas[alg], len(keys))
	if fcall {
		words[0], words[1] = fcallWord, functions[alg]
	}
	for i := range keys {
		if i == 0 && c.routed {
			words = append(words, keys[0]) // an allocation: see routed
		} else {
			words = append(words, &keys[i]) // a pointer in an interface: none
		}
	}
	// The request's time goes as a pointer into k, which boxes it without
	// an allocation (AppendFor would box the number: one).
	k.now, req.Now = req.Now, 0
	words = c.args.AppendFor(words, req, op)
	if k.now != 0 {
		words[3+len(keys)+lua.NowArg] = &k.now
	}
	ctx, cancel := c.capped(ctx)
	defer cancel()
	switch {
	case acked:
		reply, err = rediscore.Bounded(ctx, name, c.honoursContext, func(ctx context.Context) (string, error) {
			return runAcked[string](ctx, c, &k.cmd, words, req.Key)
		})
	case c.honoursContext || c.pipe != nil: // the hot path: no closure
		reply, err = send[string](ctx, c, &k.cmd, words)
	default:
		reply, err = rediscore.Bounded(ctx, name, false, func(ctx context.Context) (string, error) {
			return send[string](ctx, c, &k.cmd, words)
		})
	}
	c.failed(err)
	return reply, rediscore.WithContext(ctx, err) // a read timeout: capped's deadline
}

// RunAll implements rediscore.Client: the FCALL of All's function, or the
// EVALSHA of All.
func (c *conn) RunAll(ctx context.Context, reqs []backend.Request, keys []string, op lua.Op, now int64, fcall, acked bool) ([]int64, error) {
	words := append(make([]any, 0, 3+len(keys)+len(reqs)*lua.ArgsPerRequest), evalsha, allSHA, len(keys))
	if fcall {
		words[0], words[1] = fcallWord, allFunction
	}
	for i := range keys {
		if i == 0 && c.routed {
			words = append(words, keys[0]) // an allocation: see routed
		} else {
			words = append(words, &keys[i]) // a pointer in an interface: none
		}
	}
	words = append(words, c.args.ForAllAt(reqs, op, now)...)
	cmd := new(decisions)
	ctx, cancel := c.capped(ctx)
	defer cancel()
	var reply []int64
	var err error
	switch {
	case acked:
		reply, err = rediscore.Bounded(ctx, name, c.honoursContext, func(ctx context.Context) ([]int64, error) {
			return runAcked[[]int64](ctx, c, cmd, words, reqs[0].Key)
		})
	case c.honoursContext || c.pipe != nil: // the hot path: no closure
		reply, err = send[[]int64](ctx, c, cmd, words)
	default:
		reply, err = rediscore.Bounded(ctx, name, false, func(ctx context.Context) ([]int64, error) {
			return send[[]int64](ctx, c, cmd, words)
		})
	}
	c.failed(err)
	return reply, rediscore.WithContext(ctx, err)
}

// Del implements rediscore.Client: one DEL.
func (c *conn) Del(ctx context.Context, keys []string, key string, acked bool) error {
	ctx, cancel := c.capped(ctx)
	defer cancel()
	_, err := rediscore.Bounded(ctx, name, c.honoursContext, func(ctx context.Context) (int64, error) {
		if acked {
			return 0, c.deleteAcked(ctx, keys, key)
		}
		return c.client.Del(ctx, keys...).Result()
	})
	return err
}

// failed is told of every error. A cluster client re-reads the cluster's
// layout only every 10 seconds or on a MOVED reply, and a master that died
// answers neither: its keys would keep failing long after its replica took
// over. On any error, a cluster client is asked to reload the layout (in
// the background, at most every 200ms: go-redis's own cool-down), so that
// the keys follow their slots to the new master within moments of the
// failover.
func (c *conn) failed(err error) {
	if err != nil && c.reload != nil {
		c.reload(context.Background())
	}
}

// capped ends ctx no later than the client's read timeout, so that a call
// whose budget is longer fails then with an error that says
// context.DeadlineExceeded (WithContext), as one within its budget does.
// The Limiter's time budget (100ms by default) is already shorter than
// go-redis's read timeout. (go-redis would not resend it either: see
// decision.)
func (c *conn) capped(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.readTimeout <= 0 {
		return ctx, func() {}
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < c.readTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.readTimeout)
}

// script is the command of a decision (its FCALL, EVALSHA or EVAL), which
// go-redis never sends twice: a decision is not idempotent, and go-redis
// resends a command whose connection broke after it was written (the
// server may have run it: a failover, a network that drops the reply), so
// one request would count twice. go-redis still sends it again when it
// never reached the server (a connection that failed before the write).
type script interface {
	goredis.Cmder
	// build makes the command of words anew, routed by the first key (the
	// 4th word) on a cluster client.
	build(ctx context.Context, words []any)
}

// replying is a script whose reply is an R.
type replying[R any] interface {
	script
	Val() R
}

// decision is one request's: its reply is packed (lua.Unpack).
type decision struct{ goredis.StringCmd }

// decisions is All's: a table of integers (lua.Outcomes).
type decisions struct{ goredis.IntSliceCmd }

// NoRetry tells go-redis not to resend the command once written.
func (*decision) NoRetry() bool { return true }

// NoRetry tells go-redis not to resend the command once written.
func (*decisions) NoRetry() bool { return true }

func (d *decision) build(ctx context.Context, words []any) {
	d.StringCmd = *goredis.NewStringCmd(ctx, words...)
	d.SetFirstKeyPos(3)
}

func (d *decisions) build(ctx context.Context, words []any) {
	d.IntSliceCmd = *goredis.NewIntSliceCmd(ctx, words...)
	d.SetFirstKeyPos(3)
}

// call is one decision's FCALL or EVALSHA: the command, its words, and its
// key, which the words point to. Its room for a second key and a word more
// is kept: without it a sliding log's decision allocated once more
// (TestAllocationsPerDecision).
type call struct {
	cmd   decision
	words [3 + 2 + lua.MaxArgs]any
	keys  [2]string
	now   int64 // the request's time: its word points here
}

// The words of an EVALSHA (the script of each algorithm, and the one of
// TakeAll), and of the EVAL that replaces it after NOSCRIPT, boxed once.
var (
	evalsha, eval any = "evalsha", "eval"
	shas              = func() (b [lua.Algorithms]any) {
		for alg := range b {
			b[alg] = lua.For(backend.Algorithm(alg)).SHA1
		}
		return b
	}()
	allSHA any = lua.All.SHA1
)

// noScript turns words, an EVALSHA the server did not know, into the EVAL
// of the same script.
func noScript(words []any) {
	words[0], words[1] = eval, lua.Text(words[1].(string))
}

// send sends words, an FCALL or an EVALSHA, as cmd, routed by the first key
// (the 4th word). After NOSCRIPT (a restart, a SCRIPT FLUSH) an EVALSHA
// becomes the EVAL of its script.
func send[R any, C replying[R]](ctx context.Context, c *conn, cmd C, words []any) (R, error) {
	cmd.build(ctx, words)
	done, err := c.process(ctx, cmd)
	if done && err != nil && words[0] == evalsha && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		noScript(words)
		cmd.build(ctx, words)
		done, err = c.process(ctx, cmd)
	}
	if !done { // cmd is not to be read (process)
		var none R
		return none, err
	}
	return cmd.Val(), err
}

// Time implements rediscore.Client: TIME, on any node of a cluster or a
// ring.
func (c *conn) Time(ctx context.Context) (time.Time, error) {
	ctx, cancel := c.capped(ctx)
	defer cancel()
	return rediscore.Bounded(ctx, name, c.honoursContext, func(ctx context.Context) (time.Time, error) {
		cmd := goredis.NewTimeCmd(ctx, "time")
		_ = c.client.Process(ctx, cmd)
		return cmd.Result()
	})
}
