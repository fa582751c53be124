package script

import (
	"strings"

	"github.com/ratelimit-go/ratelimit/backend"
)

// The key layout on a Redis-protocol server, the one place it is written
// (the algorithms' Lua files read these keys). For the caller's key K under
// the prefix P, layout 2:
//
//	P{K}:sw       the sliding log: a sorted set of entries scored by time (µs)
//	P{K}:sw:m     the log's meta: a hash, n = the counter that names entries,
//	              x = the sum of cost-1 over the entries, t = the newest time,
//	              o = the oldest entry's time (empty: unknown), e = when both
//	              keys expire (ms, server clock; empty: unknown)
//	P{K}:f        the fixed window: 16 bytes, the little-endian doubles
//	              start (µs) and count
//	P{K}:c        the sliding window counter: 24 bytes, start, prev, cur
//	P{K}:g        GCRA: 32 bytes, at, level, unit, drain
//
// Layout 1 (the previous release's) has the same sliding log, and keeps the
// others as a hash and as text, under other names:
//
//	P{K}:fw       a hash: s = window start (µs), c = count
//	P{K}:swc      "start:prev:cur"
//	P{K}:gcra     "at:level:unit:drain"
//
// Packed doubles are exact (every number is an integer below 2^53), and
// the server packs and unpacks them for less than it formats and parses
// text (docs/figures.md). The scripts read
// both layouts and write the one they are told (see Layout): the state of
// a key lives under one name at a time.
//
// '{', '}' and '%' in P and in K are percent-escaped, so the braces around K
// are the only ones: K is the Redis Cluster hash tag of every key, whatever
// bytes P and K hold. All the keys of one K, under every algorithm and every
// prefix, therefore live in one slot, so one script may decide several
// policies on one key together; and distinct (P, K) pairs never share a key.
// Every write sets a TTL of the state's life or the retention, whichever is
// longer, plus TTLSlack; but a sliding log on the server's clock, whose meta
// knows when its keys expire (e), renews them only once less than the life
// or retention is left, so at most about once per TTLSlack under steady use.

// Layout is the version of the newest layout above: the scripts read it and
// layout 1, and write the one a store is built with (ValidLayout).
//
// Releases decide the same keys together during a rolling upgrade:
// layout_test.go runs the previous release's script (testdata/previous.lua,
// layout 1) beside this one's on the same keys and counts no
// over-admission, writing layout 1; and this release writing layout 1
// beside itself writing layout 2. A release that changes the layout reads
// the previous layout and writes, by default, one the previous release
// reads (keys kept apart would let each release admit a full limit): the
// upgrade procedure is in docs/scaling.md.
const Layout = 2

// DefaultLayout is the layout a store writes unless told otherwise: the
// previous release's, which every instance still running it reads. Once
// none does, stores built to write Layout spend less of the server per
// decision (docs/scaling.md).
const DefaultLayout = 1

// ValidLayout says whether a store may write layout n.
func ValidLayout(n int) bool { return n == 1 || n == Layout }

// The sliding log's suffixes, the same in both layouts.
const (
	slidingSuffix = "sw"
	metaSuffix    = ":m"
)

// suffixes are the names of the state of each algorithm but the sliding
// log's in layout 2 and in layout 1.
var suffixes = [...][2]string{
	backend.FixedWindow:          {"f", "fw"},
	backend.SlidingWindowCounter: {"c", "swc"},
	backend.GCRA:                 {"g", "gcra"},
}

var escaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

func escape(s string) string {
	if strings.ContainsAny(s, "{}%") {
		return escaper.Replace(s)
	}
	return s
}

// name is P{K}:suffix, with P (escaped already) and K escaped, in one
// allocation when neither needs escaping.
func name(prefix, key, suffix string) string {
	return prefix + "{" + escape(key) + "}:" + suffix
}

// Keys are the server keys of req's state under its algorithm, in the order
// the script takes them.
func Keys(req backend.Request) []string {
	return AppendKeys(make([]string, 0, 2), req)
}

// AppendKeys appends the two keys of req's state to keys, as Keys returns
// them: the log and its meta for a sliding log, else the state's key in
// layout 2 then in layout 1. Their text is one allocation (a sliding log's
// key is its meta's name less the suffix; the other two are one string cut
// in two).
func AppendKeys(keys []string, req backend.Request) []string {
	prefix := escape(req.Rule.Prefix())
	if alg := req.Rule.Algorithm(); alg != backend.SlidingWindow {
		k := escape(req.Key)
		both := prefix + "{" + k + "}:" + suffixes[alg][0] + prefix + "{" + k + "}:" + suffixes[alg][1]
		cut := len(prefix) + len(k) + 3 + len(suffixes[alg][0])
		return append(keys, both[:cut], both[cut:])
	}
	meta := name(prefix, req.Key, slidingSuffix+metaSuffix)
	return append(keys, meta[:len(meta)-len(metaSuffix)], meta)
}

// AllKeys are every server key of key under prefix, under every algorithm
// and both layouts: what Reset deletes.
func AllKeys(prefix, key string) []string {
	prefix = escape(prefix)
	meta := name(prefix, key, slidingSuffix+metaSuffix)
	keys := []string{meta[:len(meta)-len(metaSuffix)], meta}
	for _, alg := range []backend.Algorithm{backend.FixedWindow, backend.SlidingWindowCounter, backend.GCRA} {
		keys = append(keys, name(prefix, key, suffixes[alg][0]), name(prefix, key, suffixes[alg][1]))
	}
	return keys
}

// HashTag is the text a Redis Cluster hashes for key: between the first '{'
// and the next '}', if not empty; else the whole key.
func HashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

// Tag is the hash tag of every server key of key, under any prefix and
// algorithm (the text between the braces): a cluster client routes key's
// state by it (go-redis's MasterForKey, valkey-go's Completed.SetSlot).
func Tag(key string) string { return escape(key) }
