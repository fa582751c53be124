// Package ratelimit limits how often a key (a user, an IP address, a token)
// may act, exactly and atomically, on a storage backend of your choice.
//
// # The model
//
// A [Policy] says "at most Limit requests per Window", counted by one of four
// algorithms (see [Algorithm]; the README has a table to choose by):
//
//   - [SlidingWindow], the default, keeps a log of the admitted requests per
//     key, scored by time. To decide a request at time now, the store removes
//     the entries older than now-Window, counts the rest, and admits the
//     request only if count+cost <= Limit, recording it as one entry whatever
//     its cost. Exact: any interval of length Window holds at most Limit
//     admitted requests. A key holds at most Limit entries, so Limit is
//     bounded ([MaxLogLimit]).
//   - [FixedWindow] counts requests in windows aligned to multiples of
//     Window: one counter per key, but up to 2*Limit around a boundary.
//   - [SlidingWindowCounter] weighs the previous fixed window's count by how
//     much of it the sliding window still covers: O(1) memory, within a
//     stated bound of the exact log.
//   - [GCRA] spaces requests evenly at Limit per Window and allows bursts of
//     Burst ([TokenBucket]): O(1) memory, exact retry-after.
//
// Denied requests are never recorded. All the steps of a decision (prune,
// count, admit, record) are one atomic operation of the store (whose
// contract is package backend): a lock in the memory store, one Lua script
// in one round trip on Redis or Valkey.
// Many app instances sharing one server therefore never admit more than the
// algorithm allows between them. Every decision does bounded work, whatever
// its cost, and every quantity is computed exactly on every backend within
// the bounds Policy.Validate enforces.
//
// A key's policy may change at run time ([Limiter.SetPolicy], or per key with
// [WithPolicyFunc]) and applies at once to the history the store holds, which
// it keeps for the Limiter's retention ([WithRetention]). Quota taken by a
// request that was not served can be given back ([Limiter.Refund]).
//
// # Answers and errors
//
// Every call returns either a [Decision] or an error, never both. A Decision
// says how it was made ([Decision.Source]): by the store, or by the failure
// mode the caller chose ([WithFailOpen]) when the store could not answer; in
// the latter case the store's error goes to the [Observer], not to the caller.
// An error means no decision was made: bad input (ErrInvalidKey,
// ErrInvalidCost, ...) or, for a Limiter without a failure mode, a store that
// failed (ErrStore). Test errors with errors.Is.
//
// # Time
//
// Stores keep time in microseconds. By default a store uses its own clock
// (the server's clock on Redis and Valkey, read by the store once a second
// and estimated between, so instances with skewed clocks agree on one
// window); [WithCallerClock] makes the [Limiter] send its own
// time instead. A key's time never goes back: a request whose time is behind
// the key's (the time its state was last decided at) by up to
// backend.MaxSkew (10 s) is decided at the key's time, so callers whose
// clocks are skewed share one timeline per key and admit what one clock
// would (over an interval of real time t, what the policy admits over t plus
// the skew). State written further ahead (a clock that stepped back) is
// treated as written at the decision's time, and rewritten so: it holds quota
// for at most about one window after the clock comes back, not for the size
// of the step.
package ratelimit
