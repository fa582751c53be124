package ratelimit

import (
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
)

// Keys and their namespaces.
const (
	// MaxKeyLen is the longest key, in bytes, that a Limiter accepts. Keys
	// are otherwise arbitrary bytes: braces, spaces, NUL and invalid UTF-8
	// are fine.
	MaxKeyLen = backend.MaxKeyLen
	// MaxPrefixLen is the longest prefix, in bytes, that WithPrefix
	// accepts: the prefix is part of every stored key and sent with every
	// call.
	MaxPrefixLen = backend.MaxPrefixLen
	// DefaultPrefix namespaces the keys a Limiter writes; see [WithPrefix].
	DefaultPrefix = "ratelimit:"
)

// The times a caller's clock (WithCallerClock) may decide at: every store
// computes in integer microseconds since the Unix epoch, and a server's
// script in doubles, exact below 2^53, with room for the windows it adds. A
// time outside them is refused with ErrInvalidArgument before any I/O, as
// no store could decide it exactly.
var (
	// minTime is the earliest time a request may be decided at: a
	// microsecond after the Unix epoch.
	minTime = time.UnixMicro(backend.MinMicros)
	// maxTime is the latest: 2^53 µs after the epoch less four of the
	// longest windows (in the year 2254).
	maxTime = time.UnixMicro(backend.MaxMicros)
)

// validateTime reports, wrapping ErrInvalidArgument, a caller's time outside
// [minTime, maxTime], at which no store can decide exactly.
func validateTime(t time.Time) error {
	if t.Before(minTime) || t.After(maxTime) {
		return fmt.Errorf("%w: time %v is outside [%v, %v], where every store decides exactly", ErrInvalidArgument,
			t.UTC().Format(time.RFC3339Nano), minTime.UTC().Format(time.RFC3339Nano), maxTime.UTC().Format(time.RFC3339))
	}
	return nil
}
