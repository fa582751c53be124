// Package backend is the contract between a ratelimit.Limiter and the store
// that keeps its state, as database/sql/driver is database/sql's: what a store
// implements (Store: every operation, and what it is, its Info; a store
// embeds Unimplemented for what it leaves out), what it is asked (a Request
// under a compiled Rule) and what it answers (an Outcome, in integers). Users of the library never need it; the
// stores of this module (backend/memory, backend/redis, backend/valkey) and
// yours do. Package conformance is its executable specification.
//
// # Deciding
//
// A store decides each request in ONE atomic step: prune what has left the
// window, count, admit or deny, record. Never split it into reads and writes
// composed by the caller: that races between app instances. Package
// algorithm holds the rules of the four algorithms and their state in Go;
// a store on another database (SQL, a key-value server) loads a key's state,
// decides with it and saves it back in one transaction: every state saves
// itself as bytes (encoding.BinaryMarshaler).
//
// # Times
//
// Times cross the contract as integer microseconds since the Unix epoch. A
// Request's Now is the caller's time, or 0 when the store decides at its own
// time (a server's TIME). A store refuses a caller's time outside
// [MinMicros, MaxMicros], where every algorithm computes exactly.
//
// A store that decides at its own time reads its clock inside the atomic
// step, after taking whatever makes the step atomic (a row lock, a script,
// a mutex): the decisions on a key are then made in the order of their
// times. A clock read before the lock (PostgreSQL's now() is the
// transaction's start) lets a decision at an earlier time be applied after
// one at a later time, and under concurrency the windows admit more than
// their limit; package conformance's load scenarios catch it.
//
// # What a store keeps
//
// A key's state is named by the rule's prefix, the key and the rule's
// algorithm: one key keeps a state per algorithm, apart. After a write, a
// store keeps the state for at least Rule.Retain and for as long as it still
// counts (algorithm.Effect.Life), whichever is longer: state dropped sooner lets a key
// through again (a GCRA bucket dropped before it drains admits a second
// burst). Keeping it longer is harmless. A store that drops state by a
// clock other than the one that decided (a server's TTL counted from the
// write, while the decision used the caller's time) keeps it KeepSlack
// longer still, so that the time between the decision and the write, or a
// busy machine's delays, never drop state that counts.
//
// A key's time never goes back: a request whose Now is behind the key's own
// time (package algorithm: its newest entry's, its window's start, its
// bucket's level's) by at most MaxSkew is decided at the key's time, and its
// Outcome.At says so.
//
// A denial records no request. It writes in one case only: state written at
// a time later than the request's by more than MaxSkew (a clock that stepped
// back) is re-timed to the request's time, as package algorithm's Take does.
//
// # The penalty box
//
// Under a rule with a Block (Rule.Block, Rule.WithBlock), a Take that is
// denied, or a Charge that does not fit, blocks its key (its state: the
// rule's prefix, the key, the algorithm) for Block from that decision, in
// the same atomic step: until then every decision of that state is a
// denial whose RetryAfter is the block's rest, ResetAt its end and Count
// MaxCost, whatever the state holds (a Charge, a Refund and an Undo still
// do their work). A TakeAll denies a blocked key's request, and blocks a
// key it denies. Reset lifts a block; nothing else does, and a peek that
// would deny blocks nothing.
//
// Stored state is distrusted: a row or a key may have been written by hand,
// by a bug elsewhere or by a botched migration. State that does not load
// (UnmarshalBinary's algorithm.ErrBadState: bytes that are no state, a
// number outside [0, algorithm.MaxStored]) is no state: the store decides
// as on a fresh key and saves over it, so the key heals on its next write
// and never admits more than a fresh key would. No loop a store runs may be
// bounded by a stored number. The Redis and Valkey stores' scripts hold
// every number they read to the bounds of this package, and a key of the
// wrong type is deleted and decided as a fresh one.
package backend

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit/algorithm"
)

// KeepSlack is how much longer than max(Effect.Life, Rule.Retain) a store
// that drops state by itself (a TTL, a sweeper) on a clock other than the
// deciding one keeps it (see the package documentation). The Redis and
// Valkey stores add it to every TTL they write.
const KeepSlack = time.Second

// MaxSkew is how far a request's time may be behind a key's own time (the
// time its state was last decided at) and still be decided at the key's
// time: see package algorithm's rules. Instances whose clocks are skewed by
// up to MaxSkew (callers' clocks, or the clocks of stores that decide on
// their own machine's) share one timeline per key and admit what one clock
// would, plus at most what the algorithm admits over the skew; a clock
// further behind is taken as stepped back, and the state is re-timed to it.
const MaxSkew = algorithm.MaxSkew * time.Microsecond

// MaxKeyLen is the longest key, in bytes; keys are otherwise arbitrary bytes
// (braces, spaces, NUL, invalid UTF-8), and a store keeps every distinct key
// apart.
const MaxKeyLen = 4096

// MaxPrefixLen is the longest prefix, in bytes.
const MaxPrefixLen = 256

// The times a store decides at exactly, µs since the Unix epoch: every
// algorithm computes in integer microseconds, and a server's script in
// doubles, exact below 2^53, with room for four of the longest windows. 0 is
// not a time: a Request's Now of 0 asks for the store's clock.
const (
	MinMicros = 1
	MaxMicros = 1<<53 - 4*int64(MaxWindow/1000)
)

// Request is one decision a store makes atomically: a few words, passed by
// value.
type Request struct {
	// Rule is the policy in force now, compiled; it may differ from the one
	// the stored state was written under (a new policy applies at once to
	// the history).
	Rule *Rule
	// Key is the caller's key, 1 to MaxKeyLen bytes; with Rule.Prefix and
	// Rule.Algorithm it names the state.
	Key string
	// Cost is the number of requests to decide, in [1, Rule.MaxCost].
	Cost int64
	// Now is the caller's time in µs since the Unix epoch, or 0: the store
	// decides at its own time.
	Now int64
	// Admitted, for a Refund, is the time (µs) the admission it gives back
	// was recorded at (its Outcome's At): the store then undoes that
	// admission (package algorithm's Undo), never refusing; 0 gives back
	// the newest units (Refund). Other operations ignore it.
	Admitted int64
}

// Validate reports a request no store can decide exactly and in bounded
// time, which every store refuses before deciding (or any I/O): no rule
// (ErrInvalidArgument), a key that is empty or too long (ErrInvalidKey), a
// cost outside [1, Rule.MaxCost] (ErrInvalidCost; [1, MaxCharge] for an
// undo, which may give back a charge's), a caller's time or an admission's
// outside [MinMicros, MaxMicros] (ErrInvalidArgument). A Limiter never sends one; a
// store checks all the same, as any caller may use it directly.
func (r *Request) Validate() error {
	switch {
	case r.Rule == nil:
		return fmt.Errorf("%w: a request without a rule", ErrInvalidArgument)
	case r.Cost < 1 || r.Cost > r.Rule.maxCost && (r.Admitted == 0 || r.Cost > MaxCharge): // an undo may give back a charge's
		return fmt.Errorf("%w: cost %d, want 1 to %d", ErrInvalidCost, r.Cost, r.Rule.maxCost)
	case r.Now != 0 && (r.Now < MinMicros || r.Now > MaxMicros):
		return fmt.Errorf("%w: time %dµs is outside [%d, %d], where every store decides exactly", ErrInvalidArgument, r.Now, MinMicros, MaxMicros)
	case r.Admitted != 0 && (r.Admitted < MinMicros || r.Admitted > MaxMicros):
		return fmt.Errorf("%w: an admission at %dµs, outside [%d, %d]", ErrInvalidArgument, r.Admitted, MinMicros, MaxMicros)
	}
	return ValidateKey(r.Key)
}

// ValidateAcquire is Validate for an Acquire or a Release of permit id:
// an InFlight rule, a cost of 1 (ErrInvalidCost), an id in [1,
// algorithm.MaxPermitID] (ErrInvalidArgument).
func (r *Request) ValidateAcquire(id int64) error {
	switch {
	case r.Rule != nil && r.Rule.alg != InFlight:
		return fmt.Errorf("%w: permits under a %v rule: only an InFlight rule holds permits", ErrInvalidPolicy, r.Rule.alg)
	case r.Cost != 1:
		return fmt.Errorf("%w: %d permits at once, want 1", ErrInvalidCost, r.Cost)
	case id < 1 || id > algorithm.MaxPermitID:
		return fmt.Errorf("%w: permit id %d, want 1 to %d", ErrInvalidArgument, id, int64(algorithm.MaxPermitID))
	}
	return r.Validate()
}

// ValidateCharge is Validate for a Charge, whose cost may pass the rule's
// MaxCost: at most MaxCharge (ErrInvalidCost).
func (r *Request) ValidateCharge() error {
	if r.Rule == nil || r.Cost <= r.Rule.maxCost {
		return r.Validate()
	}
	if r.Cost > MaxCharge {
		return fmt.Errorf("%w: a charge of %d, want 1 to %d", ErrInvalidCost, r.Cost, int64(MaxCharge))
	}
	c := *r
	c.Cost = 1 // the rest as for any request
	return c.Validate()
}

// ValidateKey reports, wrapping ErrInvalidKey, why key cannot be used.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
}

// Outcome is a store's answer, in integers, as package algorithm computes
// it (a store in Go lets the algorithm write it in place): package
// ratelimit makes the user's Decision of it (Limit is Rule.MaxCost,
// Remaining the rest of it after Count). It fits in the registers a call
// returns in, so a decision crosses the interface without a copy through
// memory. Beside an error it is zero, but for a *Fallback's.
type Outcome = algorithm.Outcome

// Store keeps the state of every key and decides each request atomically
// (see the package documentation). It is the whole contract: every
// operation a layer over a store (package guard, package nearcache) must
// pass on is a method here, so that a layer forwards each of them and no
// ability is lost behind it, whatever the order of the layers; what a
// store is rather than does (in process, the node of a key, a feed of
// changes) is its Info, read once.
//
// Take, Peek and Reset every store implements; TakeAll, PeekAll, Refund,
// Charge, ChargeAll, Acquire and Release a store may leave to
// Unimplemented, embedded,
// which answers errors.ErrUnsupported
// (the one way a store says it cannot), and Info the zero Info. Every
// method returns an Outcome or an error, never both: a store that cannot
// decide returns an error, and the Limiter's failure mode chooses what to
// do (a layer that stands in for a failed store, package guard, returns
// its own decision beside a *Fallback, the one exception). A store must
// not panic (wrap a client's failures in an error),
// refuses what Request.Validate reports before deciding, and refuses an
// algorithm it does not support with an error wrapping
// errors.ErrUnsupported (see Unsupported).
type Store interface {
	// Take decides req and records it if admitted (see the package
	// documentation for the one write a denial makes).
	Take(ctx context.Context, req Request) (Outcome, error)
	// Peek decides req as Take would at this moment, and records nothing,
	// not even the pruning of what has left the window.
	Peek(ctx context.Context, req Request) (Outcome, error)
	// TakeAll decides reqs together, in one atomic step, into outs (as
	// long as reqs): if Take would admit every one, each is recorded and
	// outs holds the Takes' outcomes; otherwise nothing is recorded and
	// outs holds what Peek would say (so denials carry their exact
	// RetryAfter). ratelimit.Multi uses it when every Limiter shares the
	// store. A layer that knows a request's denial without asking the
	// store (package nearcache) may answer it alone: nothing recorded,
	// that request's outcome, and the others' left zero (At 0: not
	// decided), which ratelimit.Multi reports as policies it did not ask.
	// Two requests on the same state (prefix, key and algorithm) are not
	// supported. A store that cannot decide reqs atomically (on a server,
	// keys on different shards) either records nothing and returns an
	// error wrapping errors.ErrUnsupported (the caller then decides them
	// one by one), or decides them in two steps, as the Redis and Valkey
	// stores do on a cluster: every shard peeks at its requests, then, if
	// all would admit, every shard takes its own together. A request that
	// takes a shard's last quota between the steps makes that shard deny:
	// outs then hold the others' takes (recorded: counted against them, at
	// most the cost, once per such race) and that shard's denials; nothing
	// is ever admitted over a limit. A call that fails on one shard
	// returns a ShardError.
	TakeAll(ctx context.Context, reqs []Request, outs []Outcome) error
	// PeekAll says what Peek would of each of reqs, into outs (as long as
	// reqs), in one call: one round trip on a server (on a cluster, one
	// per shard, sent at once). It records nothing, as Peek, and is no
	// atomic step: each outcome is its request's at a moment of the call.
	// ratelimit.Multi's Peek uses it when every Limiter shares the store
	// (ratelimitd's statuses of the descriptors a denial kept it from
	// asking). A store that cannot returns an error wrapping
	// errors.ErrUnsupported, and the caller peeks one by one.
	PeekAll(ctx context.Context, reqs []Request, outs []Outcome) error
	// Refund gives back req.Cost of the quota req.Key has in use under
	// req.Rule, undoing what admissions did (see ratelimit.Limiter.Refund
	// and package algorithm), and returns what Peek of cost 1 would say
	// afterwards. A refund of more than the key has in use changes nothing
	// and is an error wrapping ErrInvalidCost.
	//
	// With req.Admitted, it undoes that admission instead (package
	// algorithm's Undo): up to req.Cost of what it still holds, never
	// refused.
	Refund(ctx context.Context, req Request) (Outcome, error)
	// Charge records req.Cost of usage known only afterwards (tokens,
	// bytes), up to MaxCharge, whatever the quota left, past the limit if
	// need be (package algorithm's Charge: later requests wait until it has
	// left the window or drained), and answers what Peek of cost 1 says
	// afterwards, Allowed when the charge fit in the quota. It validates
	// with Request.ValidateCharge.
	Charge(ctx context.Context, req Request) (Outcome, error)
	// ChargeAll is each request's Charge, into outs (as long as reqs), in
	// one call: one round trip on a server (on a cluster, one per shard,
	// sent at once), where one Charge after another takes one each. Each
	// charge is atomic on its own, as Charge is; together they are no
	// atomic step (a charge is recorded whatever the quota: there is no
	// all-or-nothing to keep). ratelimit.Multi's ChargeN uses it when
	// every Limiter shares the store (ratelimitd's descriptors counted as
	// envoyproxy/ratelimit counts them). Two requests on the same state
	// (prefix, key and algorithm) are not supported. On an error, the
	// outcomes of charges that were made are in outs (At not 0): a call
	// that fails on one shard of a cluster returns a ShardError, and the
	// other shards' charges stand. A store that cannot returns an error
	// wrapping errors.ErrUnsupported, charging nothing, and the caller
	// charges one by one.
	ChargeAll(ctx context.Context, reqs []Request, outs []Outcome) error
	// Acquire takes a permit of req.Key under req.Rule, an InFlight rule
	// (Limit permits held at once, each a lease of Window µs), as permit
	// id, when one is free; an id already held is renewed, whatever is
	// free. It answers as Take: Count the permits held, ResetAt when the
	// first lease ends, a denial's RetryAfter until one does (package
	// algorithm's Leases). req.Cost is 1; Request.ValidateAcquire checks
	// it and id. A holder renews its lease while it works (Acquire again
	// with its id) and releases it when done; one that crashed has its
	// permit back when the lease ends. Other operations refuse an InFlight
	// rule but Peek, which says how many are held.
	Acquire(ctx context.Context, req Request, id int64) (Outcome, error)
	// Release gives permit id back; an id not held (released already, or
	// its lease ended) changes nothing. It answers what Peek of 1 says
	// afterwards.
	Release(ctx context.Context, req Request, id int64) (Outcome, error)
	// Reset forgets the state of key under prefix, for every algorithm:
	// its full quota is available at once. Resetting an unknown key is not
	// an error.
	Reset(ctx context.Context, prefix, key string) error
	// Info says what the store is. It is read once, when a Limiter or a
	// layer is made over the store, and must not change.
	Info() Info
}

// Info is what a store is, rather than what it does: read once (see
// Store.Info). The zero Info is a store that waits on I/O, on one node,
// and tells of no change made elsewhere.
type Info struct {
	// InProcess says every call returns without waiting on I/O (the
	// memory store): a Limiter spares its calls the time budget (a timer
	// per call, for nothing).
	InProcess bool
	// Node, on a store whose keys live on several nodes (a Redis or
	// Valkey Cluster), names the node that decides key under prefix, as
	// the store knows the cluster now: equal names, one node; "" when it
	// cannot tell yet. A layer over the store (package guard) tells one
	// node's failure from the whole store's with it, so the keys of
	// healthy nodes stay exact. It must be quick: it is asked on every
	// call. nil: one node.
	Node func(prefix, key string) string
	// Changes, on a store shared between processes, starts listening, in
	// the background until ctx is done, for the Resets and Refunds made
	// through a store on the same server, calling changed with each one's
	// prefix and key, and with two empty strings when some may have been
	// missed (the channel went down or came back): forget everything
	// then. hearing reports whether every change is heard now; a layer
	// that remembers answers (package nearcache) must not rely on what it
	// remembers while it is not, and forgets a key at once when told.
	// nil: the store tells of none (no change is made elsewhere that it
	// could tell of).
	Changes func(ctx context.Context, changed func(prefix, key string)) (hearing func() bool)
	// Blocks says the store keeps penalty boxes (Rule.Block: see Store).
	// A Limiter refuses a policy with one on a store that does not
	// (ErrInvalidPolicy, wrapping errors.ErrUnsupported): a store written
	// before boxes were would decide such a rule as if it had none.
	Blocks bool
}
