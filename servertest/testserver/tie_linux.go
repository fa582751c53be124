package testserver

import (
	"os/exec"
	"syscall"
)

// tie has the kernel kill cmd's server when the process that started it
// ends, however it ends: a test binary killed by go test's -timeout or by a
// signal runs no cleanup, and its servers would outlive it on their ports.
// PR_SET_PDEATHSIG fires when the thread that forked the server ends, not
// only the process; the Go runtime ends a thread only when a goroutine
// locked to it exits still locked, which no caller of this package does.
func tie(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
