package guard_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A layer over a store is written against the contract alone: guard does
// not reach back up into the user's package.
func TestGuardDependsOnlyOnTheContract(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, string(out))
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/ratelimit-go/ratelimit/backend")
	require.NotContains(t, deps, "github.com/ratelimit-go/ratelimit", "guard imports the root package")
}
