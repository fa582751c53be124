package ratelimit

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The user's package is written against the contract alone: it imports no
// store (it once called the memory store on its concrete type, a second
// decision path beside the interface's), so every store is decided the
// same way, and a program that uses one store builds no other.
func TestTheRootImportsNoStore(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, string(out))
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/ratelimit-go/ratelimit/backend")
	for _, dep := range deps {
		require.False(t, strings.HasPrefix(dep, "github.com/ratelimit-go/ratelimit/backend/"), "the root imports %s", dep)
		require.False(t, strings.Contains(dep, "redis") || strings.Contains(dep, "valkey"), "the root imports %s", dep)
	}
}
