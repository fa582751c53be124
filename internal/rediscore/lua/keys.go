package lua

import (
	"strconv"
	"strings"

	"github.com/ratelimit-go/ratelimit/backend"
)

// The key layout on a Redis-protocol server: the one place the code writes
// it (the algorithms' Lua files read these keys); docs/keys.md is its
// description for users, checked against this file by
// TestTheKeyLayoutDocIsTheCodes. For the caller's key K under the prefix P:
//
//	P{K}:sw       the sliding log. Of a limit of at most ShortLog: a string
//	              of little-endian doubles, a header (the number of units,
//	              the newest's time) and the times (µs) of its units,
//	              oldest first (a request of cost c is c units).
//	              Of a larger limit: a sorted set of entries scored by time
//	              (µs), a member "id" for a request of cost 1, "id:cost"
//	              otherwise
//	P{K}:sw:m     the larger log's meta: 48 bytes, the doubles n (the
//	              counter that names entries), x (the sum of cost-1 over the
//	              entries), t (the newest entry's time), o (the oldest's),
//	              e (when both keys expire, ms on the server's clock) and c
//	              (the entries); -1 for t, o, e, c: unknown
//	P{K}:f        the fixed window: 16 bytes, the little-endian doubles
//	              start (µs) and count
//	P{K}:c        the sliding window counter: 24 bytes, start, prev, cur
//	P{K}:g        GCRA: 28 bytes, the doubles at and level, then unit and
//	              drain as 6-byte little-endian unsigned integers
//	P{K}:p        an in-flight limit's permits: a sorted set of the
//	              holders' ids, each scored by when its lease ends (µs)
//	P{K}:sw:b, P{K}:f:b, P{K}:c:b, P{K}:g:b
//	              a penalty box (a rule's Block) of the state beside it:
//	              until when (µs) the key is denied, as a decimal string
//
// Packed doubles are exact (every number is an integer below 2^53), and
// the server packs and unpacks them for less than it formats and parses
// text (docs/figures.md).
//
// '{', '}' and '%' in P and in K are percent-escaped, so the braces around K
// are the only ones: K is the Redis Cluster hash tag of every key, whatever
// bytes P and K hold. All the keys of one K, under every algorithm and every
// prefix, therefore live in one slot, so one script may decide several
// policies on one key together; and distinct (P, K) pairs never share a key.
// Every write sets a TTL of the state's life or the retention, whichever is
// longer, plus TTLSlack; but a long sliding log on the server's clock, whose
// meta knows when its keys expire (e), renews them only once less than the
// life or retention is left, so at most about once per TTLSlack under
// steady use. A log moves between its two forms when a rule of the other
// form first decides it (a live change of its limit across ShortLog), its
// entries in the window kept; to a string only once they are at most
// ShortLog units (until then the sorted set is decided as it is).

// ShortLog is the largest limit of a sliding log kept as a string (short.lua
// says why).
const ShortLog = 128

// Layout is the version of the key layout above, which the first line of
// every script names. Instances of two releases decide the same keys
// together during a rolling upgrade only if the newer reads what the older
// writes: a release that changes the layout raises Layout, reads the
// previous layout and writes one the older release reads until none
// runs (keys kept apart would let each release admit a full limit).
// releases_test.go holds the mixed-version test that proves it, run against
// the scripts of every tagged release kept in testdata/releases (none yet:
// no release has been tagged, so this layout is v1's).
const Layout = 1

// The sliding log's suffixes.
const (
	slidingSuffix = "sw"
	metaSuffix    = ":m"
)

// suffixes are the names of the state of each algorithm but the sliding
// log's.
var suffixes = [...]string{
	backend.FixedWindow:          "f",
	backend.SlidingWindowCounter: "c",
	backend.GCRA:                 "g",
	backend.InFlight:             "p",
}

// boxSuffixes are the names of each algorithm's penalty box: its state's,
// and ":b".
var boxSuffixes = [...]string{
	backend.SlidingWindow:        slidingSuffix + ":b",
	backend.FixedWindow:          "f:b",
	backend.SlidingWindowCounter: "c:b",
	backend.GCRA:                 "g:b",
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

// AppendKeys appends the keys of req's state to keys, as Keys returns them:
// the log and its meta for a sliding log (one allocation: the log's name is
// its meta's less the suffix), else the state's one key.
func AppendKeys(keys []string, req backend.Request) []string {
	prefix := escape(req.Rule.Prefix())
	alg := req.Rule.Algorithm()
	if alg != backend.SlidingWindow {
		keys = append(keys, name(prefix, req.Key, suffixes[alg]))
	} else {
		meta := name(prefix, req.Key, slidingSuffix+metaSuffix)
		keys = append(keys, meta[:len(meta)-len(metaSuffix)], meta)
	}
	if req.Rule.Block() > 0 { // the penalty box's, last
		keys = append(keys, name(prefix, req.Key, boxSuffixes[alg]))
	}
	return keys
}

// StoredKeys are the keys of Keys(req) that hold its state once it has
// some: a short sliding log's is the log's key alone.
func StoredKeys(req backend.Request) []string {
	keys := Keys(req)
	if req.Rule.Algorithm() == backend.SlidingWindow && req.Rule.Limit() <= ShortLog {
		return keys[:1]
	}
	return keys
}

// AllKeys are every server key of key under prefix, under every algorithm
// (permits included): what Reset deletes.
func AllKeys(prefix, key string) []string {
	prefix = escape(prefix)
	meta := name(prefix, key, slidingSuffix+metaSuffix)
	keys := []string{meta[:len(meta)-len(metaSuffix)], meta}
	for _, alg := range []backend.Algorithm{backend.FixedWindow, backend.SlidingWindowCounter, backend.GCRA, backend.InFlight} {
		keys = append(keys, name(prefix, key, suffixes[alg]))
	}
	for _, b := range boxSuffixes { // a Reset lets the key out
		keys = append(keys, name(prefix, key, b))
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

// Channel is the channel of changes (rediscore's Listener follows it): the
// scripts publish on it the news of a charge, a refund or an undo (News),
// and a store the news of a Reset.
const Channel = "ratelimit:changes"

// News is the message of a change to key under prefix: prefix's length,
// a colon, prefix and key.
func News(prefix, key string) string {
	return strconv.Itoa(len(prefix)) + ":" + prefix + key
}
