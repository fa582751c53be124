package lua

import (
	"encoding/binary"
	"math"
	"strconv"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/owner"
)

// The scripts' arguments: what each request sends, formatted once per
// rule for the client library.

// ArgsPerRequest is the number of arguments of each request in All
// (decide.lua).
const ArgsPerRequest = 5

// MaxArgs is the most arguments For returns (one.lua's: an undo's or a
// permit's id in ARGV[5], the news of a change in ARGV[6]).
const MaxArgs = 6

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
	// Charge records usage whatever the quota (Request.Cost of it).
	Charge
	// Undo gives back up to Request.Cost of the admission recorded at
	// Request.Admitted.
	Undo
	// Acquire takes (or renews) the permit whose id is in
	// Request.Admitted, as the script's ARGV[5] (an in-flight limit).
	Acquire
	// Release gives that permit back.
	Release
	// Look is Peek for several requests peeked together (PeekAll, by
	// All): a denial boxes nothing, as Peek's. (All's Peek is the first
	// step of a TakeAll on several shards, whose denials box their keys.)
	Look
	numOps
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
	ops         [numOps]T
	owned       *owner.Key // its arguments, kept with each rule
}

// ruleArgs are the arguments of a rule: its algorithm's name (All's), and
// its numbers in one argument (packRule).
type ruleArgs[T any] struct {
	alg, rule T
}

// NewArgs returns an ArgCache formatting numbers with format and strings
// with str.
func NewArgs[T any](format func(int64) T, str func(string) T) *ArgCache[T] {
	return &ArgCache[T]{format: format, str: str, serverClock: str(""),
		ops: [numOps]T{Take: str("take"), Peek: str("peek"), Refund: str("refund"), TakeQuiet: str("quiet"),
			Charge: str("charge"), Undo: str("undo"), Acquire: str("acquire"), Release: str("release"), Look: str("look")},
		owned: owner.New()}
}

// For returns the arguments of one request.
func (c *ArgCache[T]) For(req backend.Request, op Op) []T {
	return c.AppendFor(make([]T, 0, MaxArgs), req, op)
}

// AppendFor appends the arguments of one request to args, as For returns
// them.
func (c *ArgCache[T]) AppendFor(args []T, req backend.Request, op Op) []T {
	args = append(c.appendArgs(args, req, op), c.ruleArgs(req.Rule).rule)
	undo := op == Undo || op == Acquire || op == Release
	// A charge's, a refund's or an undo's news is published by the script.
	news := op == Charge || op == Refund || op == Undo
	switch {
	case undo:
		args = append(args, c.format(req.Admitted)) // the admission's time or the permit's id
	case news:
		args = append(args, c.serverClock) // the empty string: none
	}
	if news {
		args = append(args, c.str(News(req.Rule.Prefix(), req.Key)))
	}
	return args
}

// ForAll returns the arguments of several requests taken together.
func (c *ArgCache[T]) ForAll(reqs []backend.Request) []T { return c.ForAllOp(reqs, Take) }

// ForAllOp returns the arguments of several requests decided together with
// op: Take (TakeAll), Peek (every one peeked, nothing written but the
// boxes of the denied), Look (every one peeked, nothing written) or Charge
// (every one charged).
func (c *ArgCache[T]) ForAllOp(reqs []backend.Request, op Op) []T { return c.ForAllAt(reqs, op, 0) }

// ForAllAt is ForAllOp, with the requests on the store's clock (no Now)
// whose scripts need not read TIME (ReadsTime) decided at now instead,
// when it is not 0: the server's time as the store estimates it. For
// Charge (ChargeAll: every one charged), the news of each charge follows
// the requests' arguments, one each, in their order.
func (c *ArgCache[T]) ForAllAt(reqs []backend.Request, op Op, now int64) []T {
	size := ArgsPerRequest * len(reqs)
	if op == Charge {
		size += len(reqs)
	}
	args := make([]T, 0, size)
	estimate := c.serverClock
	if now != 0 {
		estimate = c.format(Estimated(now)) // once for every request
	}
	for _, req := range reqs {
		ra := c.ruleArgs(req.Rule)
		at := c.serverClock
		if !ReadsTime(req.Rule.Algorithm()) {
			at = estimate
		}
		args = append(c.appendArgsAt(append(args, ra.alg), req, op, at), ra.rule)
	}
	if op == Charge {
		for _, req := range reqs {
			args = append(args, c.str(News(req.Rule.Prefix(), req.Key)))
		}
	}
	return args
}

// ReadsTime says whether alg's script reads the server's TIME itself on the
// store's clock, rather than take the store's estimate of it: permits date
// their leases by it. (The sliding log dates its keys' expiry by the
// server's clock too, allowing for an estimate's error: EstimateMargin.)
func ReadsTime(alg backend.Algorithm) bool { return alg == backend.InFlight }

// algorithmArgs are the names of the algorithms in All.
var algorithmArgs = [...]string{backend.SlidingWindow: "sw", backend.FixedWindow: "fw",
	backend.SlidingWindowCounter: "swc", backend.GCRA: "gcra", backend.InFlight: "p"}

// NowArg is where a request's time is among the arguments For makes.
const NowArg = 1

// appendArgs appends op, now and cost (now at NowArg).
func (c *ArgCache[T]) appendArgs(args []T, req backend.Request, op Op) []T {
	return c.appendArgsAt(args, req, op, c.serverClock)
}

// appendArgsAt is appendArgs, with at the time of a request on the store's
// clock (no Now): the empty string (the script reads TIME), or an estimate.
func (c *ArgCache[T]) appendArgsAt(args []T, req backend.Request, op Op, at T) []T {
	if req.Now != 0 {
		at = c.format(req.Now)
	}
	return append(args, c.ops[op], at, c.format(req.Cost))
}

// ruleArgs are rule's arguments, made once per rule and kept with it.
func (c *ArgCache[T]) ruleArgs(rule *backend.Rule) *ruleArgs[T] {
	return rule.Own(c.owned, func(rule *backend.Rule) any {
		return &ruleArgs[T]{alg: c.str(algorithmArgs[rule.Algorithm()]), rule: c.str(packRule(rule))}
	}).(*ruleArgs[T])
}

// packRule is the numbers of rule as the scripts read them, in one argument
// of little-endian doubles (struct.unpack('<ddddd')): the retention (ms);
// the policy, limit, window (µs) and 0, or for GCRA burst, unit and drain;
// the penalty box's length (µs; 0: none). A script unpacks them in one
// call, where five arguments cost the server a string and a tonumber each:
// reading a request's arguments took 0.98 µs a call as seven numbers and
// 0.88-0.91 µs as op, now, cost and the five packed (functions that only
// read them, FCALL, INFO commandstats). A double holds what tonumber read
// of the decimal each number was before, rounded alike.
func packRule(rule *backend.Rule) string {
	r := rule.Rate()
	p := [3]int64{r.Limit, r.Window, 0}
	if rule.Algorithm() == backend.GCRA {
		p = [3]int64{r.Burst, r.Unit, r.Drain}
	}
	b := make([]byte, 0, 5*8)
	for _, n := range [...]int64{(rule.Retain() + 999) / 1000, p[0], p[1], p[2], rule.Block()} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(n)))
	}
	return string(b)
}
