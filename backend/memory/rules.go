package memory

import (
	"hash/maphash"
	"unique"

	"github.com/ratelimit-go/ratelimit/algorithm"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/owner"
)

// ruled is what the store derives from a rule, once per rule (kept with it:
// backend.Rule.Own): the hash of its prefix and algorithm, which with a
// key's names a state (one hash of the key finds it); the scope its records
// keep, compared as one pointer; and its rate, read in place by the
// algorithms.
type ruled struct {
	ns    uint64
	scope unique.Handle[scope]
	rate  algorithm.Rate
	block int64 // the penalty box, µs (0: none)
}

// scope is what a key's state is kept under besides the key: a prefix and
// an algorithm. Under one scope, a key names one state.
type scope struct {
	prefix string
	alg    backend.Algorithm
}

// owned names the store's values in a rule: one key for every memory store,
// as what it derives depends on the rule alone.
var owned = owner.New()

// ruleOf is what the store derived from r.
func ruleOf(r *backend.Rule) *ruled {
	if v, ok := r.Owned(owned); ok {
		return v.(*ruled)
	}
	return r.Own(owned, derive).(*ruled)
}

func derive(r *backend.Rule) any {
	return &ruled{ns: namespace(r.Prefix(), r.Algorithm()), scope: unique.Make(scope{r.Prefix(), r.Algorithm()}), rate: r.Rate(), block: r.Block()}
}

// namespaceSeed is random per process: a namespace is no hash to keep.
var namespaceSeed = maphash.MakeSeed()

// namespace is the hash of a prefix and an algorithm, which the store mixes
// with its hash of a key.
func namespace(prefix string, alg backend.Algorithm) uint64 {
	var h maphash.Hash
	h.SetSeed(namespaceSeed)
	h.WriteString(prefix)
	h.WriteByte(byte(alg))
	return h.Sum64()
}
