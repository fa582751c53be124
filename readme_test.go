package ratelimit_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
)

// Every complete program in the README (a Go block that starts with
// "package main") builds as pasted, in a module of its own that requires
// this one as a user's does (the README's replace recipe), so that the
// README never drifts from the API. The memory program also runs, and
// prints what it says.
func TestTheREADMEsProgramsBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs with the go command")
	}
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go command builds the README's programs")
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```go\n(package main\n.*?)```").FindAllStringSubmatch(string(readme), -1)
	require.GreaterOrEqual(t, len(blocks), 3, "a program per backend")
	root, err := os.Getwd()
	require.NoError(t, err)
	var sum []byte
	for _, m := range []string{".", "backend/redis", "backend/valkey"} {
		b, err := os.ReadFile(filepath.Join(m, "go.sum"))
		require.NoError(t, err)
		sum = append(sum, b...)
	}
	for i, b := range blocks {
		dir := t.TempDir()
		mod := "module readme\n\ngo 1.23\n\nrequire github.com/ratelimit-go/ratelimit v0.0.0\n\nreplace github.com/ratelimit-go/ratelimit => " + root + "\n"
		for _, m := range []string{"redis", "valkey"} {
			if strings.Contains(b[1], "backend/"+m) {
				mod += "\nrequire github.com/ratelimit-go/ratelimit/backend/" + m + " v0.0.0\n\nreplace github.com/ratelimit-go/ratelimit/backend/" + m + " => " + filepath.Join(root, "backend", m) + "\n"
			}
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(b[1]), 0o644))
		run := func(args ...string) string {
			cmd := exec.Command(goTool, args...)
			cmd.Dir = dir
			// No workspace: a user's build with the replace recipe, which
			// downloads what the module cache lacks (this package's own test
			// binary does not need the Redis clients; a new machine may
			// hold none yet).
			cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "program %d of the README: go %s:\n%s\n%s", i+1, strings.Join(args, " "), out, b[1])
			return string(out)
		}
		run("vet", ".")
		if strings.Contains(b[1], "backend/memory") {
			out := run("run", ".")
			require.Contains(t, out, "request 3: allowed=true remaining=0")
			require.Contains(t, out, "request 4: allowed=false remaining=0")
		}
	}
}

// The docs name tests as evidence: each one they name exists (names once
// drifted after renames).
func TestTheDocsNameTestsThatExist(t *testing.T) {
	var sources strings.Builder
	require.NoError(t, filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			sources.Write(b)
			return err
		}
		return err
	}))
	docs, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	named := regexp.MustCompile("`(Test[A-Z][A-Za-z0-9_]*)`")
	checked := 0
	for _, path := range append(docs, "README.md") {
		text, err := os.ReadFile(path)
		require.NoError(t, err)
		for _, m := range named.FindAllStringSubmatch(string(text), -1) {
			require.Contains(t, sources.String(), "func "+m[1]+"(", "%s names %s", path, m[1])
			checked++
		}
	}
	require.Greater(t, checked, 5, "the docs name their evidence")
}

// The README's install recipe works for a module that no proxy has, with
// the clone in a folder of any name anywhere: its lines, run as written by
// a shell in a scratch module holding the memory and Redis programs, with
// the clone's path in RL and no way to fetch this project's modules (no
// proxy, no VCS for them; the checksum database off), give a module that
// builds. The other modules come as a user's would: from the module cache
// or the proxy. (It once assumed a clone named ratelimit beside the module;
// and it once turned every proxy off, which passed only where the cache
// held what go mod tidy asks of go-redis's own tests.)
func TestTheInstallRecipeWorksWithoutAProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	install := regexp.MustCompile("```sh\n(RL=[^`]*go mod edit -replace[^`]*)```").FindStringSubmatch(string(readme))
	require.NotNil(t, install, "the README's install recipe, setting RL")
	programs := regexp.MustCompile("(?s)```go\n(package main\n.*?)```").FindAllStringSubmatch(string(readme), -1)
	require.GreaterOrEqual(t, len(programs), 2)
	root, err := os.Getwd()
	require.NoError(t, err)
	dir := t.TempDir()
	clone := filepath.Join(dir, "src", "rl-fork") // not named ratelimit, not beside the module
	require.NoError(t, os.Mkdir(filepath.Join(dir, "src"), 0o755))
	require.NoError(t, os.Symlink(root, clone))
	app := filepath.Join(dir, "work", "app")
	require.NoError(t, os.MkdirAll(app, 0o755))
	for i, p := range programs[:2] { // the memory program and the Redis one
		pkg := filepath.Join(app, fmt.Sprint("cmd", i))
		require.NoError(t, os.Mkdir(pkg, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(pkg, "main.go"), []byte(p[1]), 0o644))
	}
	env := append(os.Environ(), "GOWORK=off", "GONOPROXY=github.com/ratelimit-go", "GOVCS=github.com/ratelimit-go:off",
		"GOSUMDB=off", "GOFLAGS=")
	run := func(name string, args ...string) {
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = app, env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), out)
	}
	run("go", "mod", "init", "example.com/app")
	rel, err := filepath.Rel(app, clone)
	require.NoError(t, err)
	script := regexp.MustCompile(`(?m)^RL=\S*`).ReplaceAllString(install[1], "RL="+rel)
	require.Contains(t, script, "RL=../../src/rl-fork")
	run("sh", "-ec", script)
	run("go", "build", "./...")
}

// A program on the memory store alone holds no Redis or Valkey client in
// its module graph: the stores on servers are modules of their own, and
// the library's own tests against servers live in servertest (the graph
// once held 17 modules, both clients among them).
func TestAMemoryProgramsGraphHoldsNoClient(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	root, err := os.Getwd()
	require.NoError(t, err)
	dir := t.TempDir()
	mod := "module memoryonly\n\ngo 1.23\n\nrequire github.com/ratelimit-go/ratelimit v0.0.0\n\nreplace github.com/ratelimit-go/ratelimit => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644))
	sum, err := os.ReadFile("go.sum")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	program := "package main\n\nimport (\n\t\"github.com/ratelimit-go/ratelimit\"\n\t\"github.com/ratelimit-go/ratelimit/backend/memory\"\n)\n\n" +
		"func main() {\n\ts, _ := memory.New()\n\t_, _ = ratelimit.New(s, ratelimit.PerMinute(1))\n}\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644))
	cmd := exec.Command("go", "list", "-m", "all")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	t.Logf("%d modules in the graph:\n%s", len(strings.Split(strings.TrimSpace(string(out)), "\n")), out)
	for _, client := range []string{"github.com/redis/go-redis", "github.com/valkey-io/valkey-go"} {
		require.NotContains(t, string(out), client)
	}
}

// The README stays a page a newcomer reads whole: at most 200 lines (it
// had grown to 238), the rest in docs/.
func TestTheREADMEStaysShort(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	lines := strings.Count(string(readme), "\n")
	require.LessOrEqual(t, lines, 200, "README.md: %d lines", lines)
	require.Contains(t, string(readme), "What it does not do", "what it is not for, beside what it is")
}

// docs/keys.md gives the default prefix the Limiter uses (it once gave
// "rl:", which no release used).
func TestTheKeyLayoutGivesTheDefaultPrefix(t *testing.T) {
	keys, err := os.ReadFile("docs/keys.md")
	require.NoError(t, err)
	require.Contains(t, string(keys), "(default `"+ratelimit.DefaultPrefix+"`)")
}
