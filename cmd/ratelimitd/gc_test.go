package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// ratelimitd runs the collector at gcPercent unless GOGC is set, and an
// operator's GOGC is left as the runtime read it.
func TestTheCollectorsGoalIsOursUnlessGOGCIsSet(t *testing.T) {
	was := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(was) })
	require.Equal(t, gcPercent, tuneGC(func(string) string { return "" }))
	require.Equal(t, gcPercent, debug.SetGCPercent(100), "the goal in force")
	env := func(k string) string {
		if k == "GOGC" {
			return "100"
		}
		return ""
	}
	require.Equal(t, 100, tuneGC(env))
	require.Equal(t, 100, debug.SetGCPercent(100), "an operator's GOGC stays")
}
