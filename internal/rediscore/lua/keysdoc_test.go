package lua

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/keys.md is where users read the key layout: it must name every key
// the stores write, and the layout's version.
func TestTheKeyLayoutDocIsTheCodes(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/keys.md")
	require.NoError(t, err)
	text := string(doc)
	for _, k := range AllKeys("P", "K") {
		require.True(t, strings.HasPrefix(k, "P{K}:"), k)
		require.Contains(t, text, "`"+k+"`", "docs/keys.md names the key %s", k)
	}
	require.Contains(t, text, fmt.Sprintf("-- ratelimit scripts, key layout %d", Layout))
	require.Contains(t, text, fmt.Sprintf("limit up to %d", ShortLog))
}
