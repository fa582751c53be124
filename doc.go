// Package ratelimit limits how often a key (a user, an IP address, a token)
// may act, exactly and atomically, on a storage backend of your choice.
//
// # The model
//
// A [Policy] says "at most Limit requests per Window". The default algorithm,
// [SlidingWindow], keeps a log of every admitted request per key, scored by
// its time. To decide a request at time now, the store removes the entries
// older than now-Window, counts the rest, and admits the request only if
// count+cost <= Limit, recording it. Denied requests are never recorded, so a
// client that keeps hammering cannot grow its log beyond Limit entries, and
// there is no burst at window boundaries: any interval of length Window holds
// at most Limit admitted requests. [FixedWindow] instead counts requests in
// windows aligned to multiples of Window; it is cheaper (one counter per key)
// but admits up to 2*Limit around a boundary.
//
// All three steps (prune, count, admit) are one atomic operation of the
// [Store]: a lock in the memory store, one Lua script in one round trip on
// Redis or Valkey. Many app instances sharing one server therefore never
// admit more than Limit between them.
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
// (the server's clock on Redis and Valkey, so instances with skewed clocks
// agree on one window); [WithCallerClock] makes the [Limiter] send its own
// time instead.
package ratelimit
