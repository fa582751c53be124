package main

import "runtime/debug"

// gcPercent is the collector's goal ratelimitd runs with unless GOGC is set
// (the operator's word wins, GOGC=100 included): the heap may grow to
// five times what is live before a collection, not twice. What is live is
// small (rules, counters, a near cache of 10,000 denials by default) while
// every request allocates its messages, so at Go's default the collector
// ran many times a second and took about a sixth of the service's CPU
// under the bench's load (docs/figures.md). GOMEMLIMIT still bounds the
// heap when set.
const gcPercent = 400

// tuneGC sets the collector's goal to gcPercent unless getenv has GOGC,
// which the runtime has applied already.
func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}
