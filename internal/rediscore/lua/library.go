package lua

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"

	"github.com/ratelimit-go/ratelimit/backend"
)

// The scripts of one request as a function library (FUNCTION LOAD, FCALL:
// Redis 7 and Valkey). The server runs a script's whole text on every
// EVALSHA, creating the closures it defines each time; a library's text
// runs once, when it is loaded, so its helpers are made once and a call runs
// the function alone. FCALL costs the server less than EVALSHA by more than
// the noise (docs/figures.md), so the stores call the functions where the
// server has them, and EVALSHA where it does not (Redis 6) or while it
// refuses to load them. Several requests together (TakeAll) are a function
// too (AllFunction, decide.lua's body), over the algorithms' functions made
// at load: All by EVALSHA made every one of them on every call, 2.8 µs of
// the server's time a call, half a one-key TakeAll's. The state a call sets
// (quiet, pending) the library keeps between calls: every call sets it
// first. A library's top runs with no access to globals (math, string):
// only the functions use them.

// LibraryName is the name of the library of this version of the scripts:
// its text's hash, so that libraries of releases with other scripts live
// side by side on one server during a rolling upgrade.
var LibraryName string

// Library is the text FUNCTION LOAD takes.
var Library string

// functions are the names of the functions, by algorithm.
var functions [len(bodies)]string

// Function is the name of the function deciding one request under alg, as
// For(alg) does, with the same keys and arguments.
func Function(alg backend.Algorithm) string { return functions[alg] }

// libraryTop is the library's text outside its functions, run at load:
// the sliding log's helpers, the other algorithms' functions and All's
// helpers (all.lua) are made once: All's closures made on every call cost
// it 4% of its server time on three keys (docs/figures.md).
var libraryTop = prelude + sliding + function("fixed", fixedBody) + function("counter", counterBody) + function("gcra", gcraBody) + allHelpers

// allFunction is the name of the function deciding several requests
// together, as All does, with the same keys and arguments.
var allFunction string

// AllFunction is the name of the function deciding several requests
// together (TakeAll, or several peeks), as All does, with the same keys and
// arguments.
func AllFunction() string { return allFunction }

// bodies are the functions' bodies, by algorithm.
var bodies = [...]string{
	backend.SlidingWindow:        one + slidingBody,
	backend.FixedWindow:          one + fixedBody,
	backend.SlidingWindowCounter: one + counterBody,
	backend.GCRA:                 one + gcraBody,
	backend.InFlight:             one + inflightBody,
}

// FunctionParts are the library's text outside its functions and the body
// of alg's function (KEYS and ARGV its arguments), for a harness that runs
// a function's work as the server does (bench/peers).
func FunctionParts(alg backend.Algorithm) (top, body string) { return libraryTop, bodies[alg] }

// packing is the text after a body's decide_one in the library: the
// function registered, which packs its answer (common.lua's packed). The
// library and it are made once, at load.
const packing = "return function(KEYS, ARGV) return packed(decide_one(KEYS, ARGV)) end\nend)())\n"

func init() {
	h := sha1.Sum([]byte(libraryTop + strings.Join(bodies[:], "") + decide + packing))
	LibraryName = "ratelimit_" + hex.EncodeToString(h[:6])
	var lib strings.Builder
	lib.WriteString("#!lua name=" + LibraryName + "\n" + libraryTop)
	for alg, b := range bodies {
		functions[alg] = LibraryName + "_" + algorithmArgs[alg]
		lib.WriteString("redis.register_function('" + functions[alg] + "', (function()\n" + decideOne(b) + packing)
	}
	allFunction = LibraryName + "_all"
	lib.WriteString("redis.register_function('" + allFunction + "', function(KEYS, ARGV)\n" + decide + "end)\n")
	Library = lib.String()
}

// FunctionMissing reports whether err is a server's answer that it has no
// such function (FCALL before FUNCTION LOAD, or after FUNCTION FLUSH or a
// restart): the store loads Library and calls again.
func FunctionMissing(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Function not found")
}

// NoFunctions reports whether err is a server's answer that functions are
// not for this client: it has none (before Redis 7: FCALL and FUNCTION are
// unknown commands), or an ACL forbids FCALL or FUNCTION LOAD (NOPERM). The
// store runs the scripts by EVALSHA then.
func NoFunctions(err error) bool {
	if err == nil {
		return false
	}
	msg := strings.ToLower(err.Error())
	return (strings.Contains(msg, "unknown command") || strings.Contains(msg, "noperm")) &&
		(strings.Contains(msg, "fcall") || strings.Contains(msg, "function"))
}

// LibraryLoaded reports whether err, FUNCTION LOAD's, says the library is
// there: none, or "already exists" (another instance loaded it first).
func LibraryLoaded(err error) bool {
	return err == nil || strings.Contains(err.Error(), "already exists")
}
