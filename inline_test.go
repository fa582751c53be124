package ratelimit_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Allow and AllowN stay small enough for the compiler to inline: a
// Decision does not fit in result registers, and a call that returns one
// without being inlined makes its caller copy it twice more (see
// docs/figures.md). A change that grows them fails here, not in a
// benchmark someone has to run.
func TestAllowIsInlined(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the package with the go command")
	}
	out, err := exec.Command("go", "build", "-gcflags=-m", ".").CombinedOutput()
	require.NoError(t, err, string(out))
	for _, m := range []string{"(*Limiter).Allow", "(*Limiter).AllowN"} {
		require.Contains(t, string(out), "can inline "+m+"\n", "the compiler's decisions:\n%s", grep(string(out), "Limiter)."))
	}
}

func grep(text, s string) string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, s) {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
