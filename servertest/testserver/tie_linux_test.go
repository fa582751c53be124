package testserver

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// helperEnv makes the test binary, run again by a test, start a server and
// wait to be killed (TestMain, for
// TestAStartedServerDiesWithTheProcessThatStartedIt).
const helperEnv = "TESTSERVER_HELPER_STARTS"

// A test binary killed before its cleanup (go test's -timeout, a signal, a
// pipe closed under it) left its servers running, on their ports, until
// someone killed them. The kernel now kills a server when the process that
// started it dies.
func TestAStartedServerDiesWithTheProcessThatStartedIt(t *testing.T) {
	path := binary(t)
	helper := exec.Command(os.Args[0])
	helper.Env = append(os.Environ(), helperEnv+"="+path)
	out, err := helper.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, helper.Start())
	defer func() { _ = helper.Process.Kill(); _ = helper.Wait() }()

	pid := 0
	lines := bufio.NewScanner(out)
	for pid == 0 && lines.Scan() {
		if said, ok := strings.CutPrefix(lines.Text(), "server "); ok {
			f := strings.Fields(said) // pid, directory
			require.Len(t, f, 2)
			pid, err = strconv.Atoi(f[0])
			require.NoError(t, err)
			t.Cleanup(func() { os.RemoveAll(f[1]) }) // the helper removes nothing
		}
	}
	require.NotZero(t, pid, "the helper said no server pid: %v", lines.Err())
	require.True(t, alive(pid), "the server runs while its starter does")

	require.NoError(t, helper.Process.Kill()) // SIGKILL: no cleanup runs
	_ = helper.Wait()
	// The kernel signals at once; the wait is only for a busy machine to
	// schedule the server's exit. A server still running is killed here,
	// so a failing run leaves nothing behind.
	deadline := time.Now().Add(30 * time.Second)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("server %d still runs 30 s after the process that started it was killed", pid)
	}
}

// TestMain runs the test binary as the process the test above kills, when
// helperEnv names a server binary: it starts a server, says its pid and
// directory, and waits.
func TestMain(m *testing.M) {
	path := os.Getenv(helperEnv)
	if path == "" {
		os.Exit(m.Run())
	}
	s, err := startBinary(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("server %d %s\n", s.cmd.Process.Pid, s.dir)
	time.Sleep(time.Hour)
}

// alive reports whether pid runs: it exists and is not a zombie waiting for
// a parent (init, here) to reap it.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces, the state follows its ')'.
	_, rest, ok := strings.Cut(string(stat), ") ")
	return ok && !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}
