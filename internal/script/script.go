// Package script holds the Lua scripts that make each decision on a Redis
// protocol server, the one copy shared by the Redis and Valkey backends, and
// the Go side of their calling convention: keys (keys.go), arguments, reply.
// The algorithms are one Lua file each; a request runs the script of its
// algorithm alone (For), several together run them all (All).
package script

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-go/ratelimit/algorithm"
	"github.com/ratelimit-go/ratelimit/backend"
)

var (
	//go:embed common.lua
	common string
	//go:embed sliding.lua
	slidingLong string
	//go:embed short.lua
	slidingShort string
	//go:embed fixed.lua
	fixed string
	//go:embed counter.lua
	counter string
	//go:embed gcra.lua
	gcra string
	//go:embed decide.lua
	decide string
	//go:embed one.lua
	one string
	//go:embed state.lua
	state string

	// sliding is the sliding log's functions, both forms.
	sliding = slidingLong + strings.Replace(slidingShort, "= SHORT_LOG", "= "+strconv.Itoa(ShortLog), 1)

	// The bodies of the O(1) algorithms, each after the read of its state.
	fixedBody, counterBody, gcraBody = state + fixed, state + counter, state + gcra

	// prelude is common.lua with the bounds of package backend and the TTL
	// slack written in.
	prelude = strings.Replace(common, "= BOUNDS", fmt.Sprintf("= %d, %d, %d, %d, %d, %d", backend.MaxMicros, backend.MaxLimit,
		backend.MaxGCRAUnits, backend.MaxWindow.Microseconds(), backend.MaxLogLimit, TTLSlack), 1)

	// All decides one request or several together (TakeAll), under any
	// algorithm: common.lua, the sliding log's functions, a function around
	// each other algorithm's body, then decide.lua.
	All = newLua(prelude + sliding + function("fixed", fixedBody) + function("counter", counterBody) + function("gcra", gcraBody) + decide)

	// ones are the scripts of one request (Take, Peek, Refund), by
	// algorithm: the server runs a script's whole text on every call, so
	// each holds its algorithm's only, and but for the sliding log's, as
	// the script's own body: a call creates no closure (the server's time
	// per decision: docs/figures.md).
	ones = [...]*Lua{
		backend.SlidingWindow:        newLua(prelude + sliding + one + "return sliding(ka, kb, op, now, cost, retain, p1, p2, own_clock)\n"),
		backend.FixedWindow:          newLua(prelude + one + fixedBody),
		backend.SlidingWindowCounter: newLua(prelude + one + counterBody),
		backend.GCRA:                 newLua(prelude + one + gcraBody),
	}

	byName = func() map[string]string {
		m := map[string]string{All.SHA1: All.Text}
		for _, l := range ones {
			m[l.SHA1] = l.Text
		}
		return m
	}()
)

// function wraps the body of an algorithm (its file) in a function of the
// variables one.lua gives a body, created once per call of All.
func function(name, body string) string {
	return "local function " + name + "(ka, op, now, cost, retain, p1, p2, p3, own_clock)\n" + body + "end\n"
}

// Lua is one script: its text, and its name for EVALSHA (the hex SHA-1 of
// the text).
type Lua struct{ Text, SHA1 string }

func newLua(text string) *Lua {
	h := sha1.Sum([]byte(text))
	return &Lua{Text: text, SHA1: hex.EncodeToString(h[:])}
}

// For is the script deciding one request under alg (Take, Peek, Refund),
// with the arguments For and AppendFor make; several requests together
// (TakeAll) take All.
func For(alg backend.Algorithm) *Lua { return ones[alg] }

// Scripts are every script: All, then one per algorithm.
func Scripts() []*Lua { return append([]*Lua{All}, ones[:]...) }

// Text is the text of the script named sha (for EVAL after NOSCRIPT), or "".
func Text(sha string) string { return byName[sha] }

// TTLSlack is backend.KeepSlack in ms: how much longer than its life and
// retention a key lives after its last write. The TTL counts from the
// write on the server's clock, while a decision may be on the caller's.
const TTLSlack = int64(backend.KeepSlack / time.Millisecond)

// ArgsPerRequest is the number of arguments of each request in All
// (decide.lua).
const ArgsPerRequest = 8

// MaxArgs is the most arguments For returns (one.lua's).
const MaxArgs = ArgsPerRequest - 1

// Op is what the script does with a request.
type Op uint8

const (
	// Take decides and records an admitted request.
	Take Op = iota
	// Peek decides and records nothing.
	Peek
	// Refund gives quota back (Request.Cost of it).
	Refund
	// TakeQuiet is Take, but a denial writes nothing at all: a TakeAll of
	// one request (see quiet in common.lua), which runs the request's own
	// script (or function) rather than All.
	TakeQuiet
)

// Args are the script's arguments for one request (For's), as strings.
func Args(req backend.Request, op Op) []string {
	return NewStringArgs().For(req, op)
}

// NewStringArgs is an ArgCache of the arguments as strings.
func NewStringArgs() *ArgCache[string] {
	return NewArgs(func(n int64) string { return strconv.FormatInt(n, 10) }, func(s string) string { return s })
}

// ArgCache builds the script's arguments in a client's own type (string for
// valkey-go, any for go-redis), formatting what depends only on the rule
// once per rule (kept with it: backend.Rule.Own) rather than once per
// decision. Safe for concurrent use.
type ArgCache[T any] struct {
	format      func(int64) T
	str         func(string) T
	serverClock T // the "now" that asks for the server's TIME; the empty string
	ops         [4]T
}

// ruleArgs are the arguments of a rule.
type ruleArgs[T any] struct {
	alg      T
	retainMS T
	// policy is limit and window, or for GCRA burst, unit and drain.
	policy []T
}

// NewArgs returns an ArgCache formatting numbers with format and strings
// with str.
func NewArgs[T any](format func(int64) T, str func(string) T) *ArgCache[T] {
	return &ArgCache[T]{format: format, str: str, serverClock: str(""),
		ops: [4]T{Take: str("take"), Peek: str("peek"), Refund: str("refund"), TakeQuiet: str("quiet")}}
}

// For returns the arguments of one request.
func (c *ArgCache[T]) For(req backend.Request, op Op) []T {
	return c.AppendFor(make([]T, 0, MaxArgs), req, op)
}

// AppendFor appends the arguments of one request to args, as For returns
// them.
func (c *ArgCache[T]) AppendFor(args []T, req backend.Request, op Op) []T {
	ra := c.ruleArgs(req.Rule)
	return append(c.appendArgs(args, req, op, ra), ra.policy...)
}

// ForAll returns the arguments of several requests taken together.
func (c *ArgCache[T]) ForAll(reqs []backend.Request) []T { return c.ForAllOp(reqs, Take) }

// ForAllOp returns the arguments of several requests decided together with
// op: Take (TakeAll) or Peek (every one peeked, nothing written).
func (c *ArgCache[T]) ForAllOp(reqs []backend.Request, op Op) []T {
	args := make([]T, 0, ArgsPerRequest*len(reqs))
	for _, req := range reqs {
		ra := c.ruleArgs(req.Rule)
		args = append(c.appendArgs(append(args, ra.alg), req, op, ra), ra.policy...)
		if len(ra.policy) == 2 {
			args = append(args, c.serverClock) // the empty string: no third number
		}
	}
	return args
}

// algorithmArgs are the names of the algorithms in All.
var algorithmArgs = [...]string{backend.SlidingWindow: "sw", backend.FixedWindow: "fw",
	backend.SlidingWindowCounter: "swc", backend.GCRA: "gcra"}

// appendArgs appends op, now, cost and the retention.
func (c *ArgCache[T]) appendArgs(args []T, req backend.Request, op Op, ra *ruleArgs[T]) []T {
	now := c.serverClock
	if req.Now != 0 {
		now = c.format(req.Now)
	}
	return append(args, c.ops[op], now, c.format(req.Cost), ra.retainMS)
}

// ruleArgs are rule's arguments, made once per rule and kept with it.
func (c *ArgCache[T]) ruleArgs(rule *backend.Rule) *ruleArgs[T] {
	return rule.Own(c, func(rule *backend.Rule) any {
		r := rule.Rate()
		ra := &ruleArgs[T]{alg: c.str(algorithmArgs[rule.Algorithm()]), retainMS: c.format((rule.Retain() + 999) / 1000)}
		if rule.Algorithm() == backend.GCRA {
			ra.policy = []T{c.format(r.Burst), c.format(r.Unit), c.format(r.Drain)}
		} else {
			ra.policy = []T{c.format(r.Limit), c.format(r.Window)}
		}
		return ra
	}).(*ruleArgs[T])
}

// CheckAll is Request.Validate for each of reqs, and checks that outs has
// room for their outcomes.
func CheckAll(reqs []backend.Request, outs []backend.Outcome) error {
	if len(outs) != len(reqs) {
		return fmt.Errorf("%w: %d outcomes for %d requests", backend.ErrInvalidArgument, len(outs), len(reqs))
	}
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			return err
		}
	}
	return nil
}

// KeysAll are the keys of several requests decided together, in the
// script's order. On a cluster (anyKeys false) one script may touch them all
// only if they share a hash tag: one caller's key under several policies;
// otherwise it fails, wrapping ErrApart (and errors.ErrUnsupported: see
// TakeApart). A single server (anyKeys) has no slots: any keys go together.
// Either way each request must have state of its own (else
// errors.ErrUnsupported).
func KeysAll(reqs []backend.Request, anyKeys bool) ([]string, error) {
	keys := make([]string, 0, len(reqs)+1)
	apart := false
	for i, req := range reqs {
		apart = apart || req.Key != reqs[0].Key
		for _, other := range reqs[:i] {
			if other.Key == req.Key && other.Rule.Prefix() == req.Rule.Prefix() && other.Rule.Algorithm() == req.Rule.Algorithm() {
				return nil, fmt.Errorf("two requests on the state of %q under %q: %w", req.Key, req.Rule.Prefix(), errors.ErrUnsupported)
			}
		}
		keys = AppendKeys(keys, req)
	}
	if apart && !anyKeys {
		return nil, fmt.Errorf("%w: keys %q and others", ErrApart, reqs[0].Key)
	}
	return keys, nil
}

// ErrApart is KeysAll's error for requests on keys that may live on
// different shards of a cluster. It wraps errors.ErrUnsupported.
var ErrApart = fmt.Errorf("keys that may live on different shards: %w", errors.ErrUnsupported)

// replyLen is the number of integers the script returns per request.
const replyLen = 5

// refused is the script's "allowed" for a refund of more than is in use.
const refused = 2

// Outcome reads the script's reply for one request. A refused refund is an
// error wrapping backend.ErrInvalidCost.
func Outcome(reply []int64) (backend.Outcome, error) {
	if len(reply) != replyLen {
		return backend.Outcome{}, fmt.Errorf("unexpected script reply %v", reply)
	}
	if reply[0] == refused {
		return backend.Outcome{}, fmt.Errorf("%w: a refund of more than the %d in use", backend.ErrInvalidCost, reply[1])
	}
	return backend.Outcome{Outcome: algorithm.Outcome{Allowed: reply[0] == 1, Count: reply[1], ResetAt: reply[2], RetryAfter: reply[3], At: reply[4]}}, nil
}

// Outcomes reads the script's reply for several requests into outs.
func Outcomes(reply []int64, outs []backend.Outcome) error {
	if len(reply) != replyLen*len(outs) {
		return fmt.Errorf("unexpected script reply %v for %d requests", reply, len(outs))
	}
	for i := range outs {
		outs[i], _ = Outcome(reply[replyLen*i : replyLen*(i+1)])
	}
	return nil
}

// WithContext returns err, wrapping ctx's error too when ctx is done and err
// does not already: a client that notices a deadline as a network timeout
// ("i/o timeout") then still answers errors.Is(err,
// context.DeadlineExceeded), as the time budget's contract says.
func WithContext(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, ctx.Err()) {
		return err
	}
	return fmt.Errorf("%w (%w)", err, ctx.Err())
}

// Recover, deferred by a backend's method, turns a panic of the client into
// an error wrapping backend.ErrStore, prefixed with the backend's name: a
// client's bug (valkey-go panics on a command whose keys are in two cluster
// slots) must not take its caller's process down.
func Recover(name string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s: the client panicked: %v: %w", name, r, backend.ErrStore)
	}
}

// Bounded runs call, returning no later than when ctx is done even if the
// client does not (call then finishes in the background, at the cost of a
// goroutine per call); honoured says the client returns by itself. A panic of
// call comes back as Recover's error.
func Bounded[T any](ctx context.Context, name string, honoured bool, call func(context.Context) (T, error)) (T, error) {
	if honoured || ctx.Done() == nil {
		return call(ctx)
	}
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		func() {
			defer Recover(name, &r.err)
			r.v, r.err = call(ctx)
		}()
		done <- r
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}
