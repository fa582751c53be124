// Package lua is what a Redis-protocol store runs on the server and how it
// speaks to it, shared by the Redis and Valkey backends (package rediscore
// is the store's flow over a client). One job per file:
//
//   - lua.go: the Lua scripts that make each decision (one file per
//     algorithm; a request runs its algorithm's script alone, For, several
//     together all of them, All); library.go: the same as a function
//     library (FCALL);
//   - keys.go: the key layout (docs/keys.md describes it);
//   - args.go and reply.go: the scripts' arguments and replies.
package lua

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
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
	//go:embed log.lua
	slidingParts string
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
	decideFile string
	//go:embed all.lua
	allHelpers string
	//go:embed one.lua
	one string
	//go:embed state.lua
	state string
	//go:embed inflight.lua
	inflightBody string
	//go:embed box.lua
	box string

	// sliding is the sliding log's functions, both forms.
	sliding = slidingParts + slidingLong + strings.Replace(slidingShort, "= SHORT_LOG", "= "+strconv.Itoa(ShortLog), 1)

	// epilogue is box.lua with the channel of changes written in, and
	// decide decide.lua (a ChargeAll's news).
	epilogue = strings.Replace(box, "'CHANNEL'", "'"+Channel+"'", 1)
	decide   = strings.Replace(decideFile, "'CHANNEL'", "'"+Channel+"'", 1)

	// The bodies of the O(1) algorithms, each after the read of its state
	// and before the penalty box's epilogue, which returns the answer.
	fixedBody, counterBody, gcraBody = state + fixed + epilogue, state + counter + epilogue, state + gcra + epilogue

	// slidingBody calls the sliding log's function (the functions, sliding,
	// come first).
	slidingBody = "local r = sliding(ka, kb, op, now, cost, retain, p1, p2, own_clock, at)\n" + epilogue

	// prelude is common.lua with the bounds of package backend, the TTL
	// slack and the largest skew written in.
	prelude = strings.Replace(common, "= BOUNDS", fmt.Sprintf("= %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d", backend.MaxMicros, backend.MaxLimit+backend.MaxCharge,
		int64(algorithm.MaxStored), backend.MaxWindow.Microseconds(), backend.MaxLogLimit, TTLSlack, backend.MaxSkew.Microseconds(),
		backend.MaxCharge, algorithm.MaxDebt, int64(algorithm.MaxStored), EstimateMargin.Milliseconds()), 1)

	// All decides one request or several together (TakeAll), under any
	// algorithm: common.lua, the sliding log's functions, a function around
	// each other algorithm's body and all.lua's helpers (the library's
	// top), then decide.lua.
	All = newLua(libraryTop + decide)

	// ones are the scripts of one request (Take, Peek, Refund), by
	// algorithm: the server runs a script's whole text on every call, so
	// each holds its algorithm's only, and but for the sliding log's
	// helpers, one closure a call: decide_one, whose answer the script
	// packs. These run where the library cannot (before Redis 7, a
	// refused library, a write the replicas acknowledge); the library's
	// functions make theirs at load.
	ones = [...]*Lua{
		backend.SlidingWindow:        newLua(prelude + sliding + oneScript(one+slidingBody)),
		backend.FixedWindow:          newLua(prelude + oneScript(one+fixedBody)),
		backend.SlidingWindowCounter: newLua(prelude + oneScript(one+counterBody)),
		backend.GCRA:                 newLua(prelude + oneScript(one+gcraBody)),
		backend.InFlight:             newLua(prelude + oneScript(one+inflightBody)),
	}

	byName = func() map[string]string {
		m := map[string]string{All.SHA1: All.Text}
		for _, l := range ones {
			m[l.SHA1] = l.Text
		}
		return m
	}()
)

// decideOne is the function decide_one of one request, whose text is one.lua
// and its algorithm's body: it answers a table, which the caller packs
// (common.lua's packed; Unpack reads it).
func decideOne(text string) string {
	return "local function decide_one(KEYS, ARGV)\n" + text + "end\n"
}

// oneScript is the script of one request after its helpers: decide_one
// (a closure a call, as a script's whole text runs on every call), its
// answer packed.
func oneScript(text string) string {
	return decideOne(text) + "return packed(decide_one(KEYS, ARGV))\n"
}

// function wraps the body of an algorithm (its file) in a function of the
// variables one.lua gives a body: made on every call of All, once when the
// library is loaded.
func function(name, body string) string {
	return "local function " + name + "(ka, op, now, cost, retain, p1, p2, p3, own_clock, at)\n" + body + "end\n"
}

// Lua is one script: its text, and its name for EVALSHA (the hex SHA-1 of
// the text).
type Lua struct{ Text, SHA1 string }

func newLua(text string) *Lua {
	h := sha1.Sum([]byte(text))
	return &Lua{Text: text, SHA1: hex.EncodeToString(h[:])}
}

// Algorithms is the number of algorithms that have a script of one request
// (For), InFlight's permits included: the size of an array of them.
const Algorithms = len(ones)

// For is the script deciding one request under alg (Take, Peek, Refund),
// with the arguments For and AppendFor make; several requests together
// (TakeAll) take All.
func For(alg backend.Algorithm) *Lua { return ones[alg] }

// Scripts are every script: All, then one per algorithm.
func Scripts() []*Lua { return append([]*Lua{All}, ones[:]...) }

// Text is the text of the script named sha (for EVAL after NOSCRIPT), or "".
func Text(sha string) string { return byName[sha] }

// EstimateMargin is how far the scripts allow the store's estimate of the
// server's time (Estimated) to be from the server's clock, where it counts:
// the sliding log's keys are renewed once they would not outlive its
// window (or retention) by that margin. It covers rediscore.EstimateError and the drift
// of the clocks over an estimate's life (rediscore's tests hold it so),
// twice over: a renewal a few milliseconds early costs nothing.
const EstimateMargin = 20 * time.Millisecond

// Estimated is the time argument of a request decided at now (µs), the
// server's time as the store estimates it: -now, which the scripts tell
// from a caller's time by its sign (common.lua's clock_of).
func Estimated(now int64) int64 { return -now }

// TTLSlack is backend.KeepSlack in ms: how much longer than its life and
// retention a key lives after its last write. The TTL counts from the
// write on the server's clock, while a decision may be on the caller's.
const TTLSlack = int64(backend.KeepSlack / time.Millisecond)
