package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// ratelimitd runs the collector at gcPercent unless GOGC is set, and an
// operator's GOGC is left as the runtime applied it.
func TestTheCollectorsGoalIsOursUnlessGOGCIsSet(t *testing.T) {
	was := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(was) })
	tuneGC(func(string) string { return "" })
	require.Equal(t, gcPercent, debug.SetGCPercent(150), "the goal in force")
	tuneGC(func(k string) string {
		if k == "GOGC" {
			return "150"
		}
		return ""
	})
	require.Equal(t, 150, debug.SetGCPercent(100), "an operator's GOGC stays")
}
