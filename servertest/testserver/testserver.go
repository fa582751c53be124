// Package testserver gives tests a real Redis-protocol server: the one named
// by an environment variable, else a server binary from PATH started on a free
// loopback port with persistence off. With neither a test skips, or fails when
// CI=true. On a machine with a Docker engine and no server binaries, run the
// tests through the tools/containers module, which starts containers and sets
// the variables:
//
//	go run ./tools/containers go test -race -count=1 ./...
//
// (Docker is not a dependency of the library or of its tests: only that tool
// builds the Docker client.)
//
// A package starts at most one server of each kind, shared by its tests
// (Get), and stops it when its tests are done (Main). A test that needs a
// server of its own, to kill or to configure, starts one with Own.
package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is a server the tests can reach at Addr.
type Server struct {
	// Addr is host:port on loopback.
	Addr string
	// Origin says what it is: "$REDIS_ADDR", "redis-server 7.0.15", ...
	Origin string

	binary string // set when this package started it, so it can stop it
	extra  []string
	bus    string // a cluster node's bus port, when given with --cluster-port
	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// Kind describes where to find one kind of server.
type Kind struct {
	Env      string   // the variable naming an existing server
	Binaries []string // server binaries to try from PATH, in order
}

var (
	// Redis: $REDIS_ADDR, else redis-server.
	Redis = Kind{Env: "REDIS_ADDR", Binaries: []string{"redis-server"}}
	// Valkey: $VALKEY_ADDR, else valkey-server, else redis-server (the same
	// protocol and scripting).
	Valkey = Kind{Env: "VALKEY_ADDR", Binaries: []string{"valkey-server", "redis-server"}}
)

var (
	mu      sync.Mutex
	started = map[string]*Server{}
)

// Main is a test package's TestMain: it runs the tests, then stops the
// servers Get started.
func Main(m *testing.M) {
	code := m.Run()
	mu.Lock()
	for _, s := range started {
		s.Stop()
	}
	for _, c := range clusters {
		c.Stop()
	}
	started, clusters = map[string]*Server{}, map[string]*Cluster{}
	mu.Unlock()
	os.Exit(code)
}

// Get returns the package's server of kind k, starting it on first use.
func Get(t testing.TB, k Kind) *Server {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if s, ok := started[k.Env]; ok {
		return s
	}
	s, err := find(k)
	if err != nil {
		unavailable(t, "no %s server: %v", k.Env, err)
	}
	started[k.Env] = s
	return s
}

// Own starts a server of kind k for t alone, from the first of k's binaries
// on PATH, with the extra arguments; it is stopped when t ends. Kill and
// Restart work on it.
func Own(t testing.TB, k Kind, extra ...string) *Server {
	t.Helper()
	s, err := StartFromPath(k.Binaries, extra...)
	if err != nil {
		unavailable(t, "no server of the test's own: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// OwnCluster starts a one-node Redis Cluster of kind k for t alone: a real
// cluster, holding every slot, on which a command whose keys are in two
// slots fails (CROSSSLOT), as on a cluster of many nodes.
func OwnCluster(t testing.TB, k Kind) *Server {
	t.Helper()
	s := Own(t, k, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := command(ctx, s.Addr, "CLUSTER", "ADDSLOTSRANGE", "0", "16383"); err != nil {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
	}
	for {
		info, err := command(ctx, s.Addr, "CLUSTER", "INFO")
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return s
		}
		if ctx.Err() != nil {
			t.Fatalf("the cluster at %s is not ok within 10s: %v %q", s.Addr, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// unavailable skips t, or fails it under CI=true, where every server must be
// reachable.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format+" (and CI=true: the tests must not skip)", args...)
	}
	t.Skipf(format, args...)
}

func find(k Kind) (*Server, error) {
	if addr := os.Getenv(k.Env); addr != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return &Server{Addr: addr, Origin: "$" + k.Env}, waitReady(ctx, addr)
	}
	s, err := StartFromPath(k.Binaries)
	if err != nil {
		return nil, fmt.Errorf("%w, or set %s (with a Docker engine: go run ./tools/containers go test ./...)", err, k.Env)
	}
	return s, nil
}

// StartFromPath starts the first of binaries found on PATH (see
// startBinary); the caller stops it.
func StartFromPath(binaries []string, extra ...string) (*Server, error) {
	for _, bin := range binaries {
		if path, err := exec.LookPath(bin); err == nil {
			return startBinary(path, extra...)
		}
	}
	return nil, fmt.Errorf("none of %s is on PATH (apt-get install redis-server)", strings.Join(binaries, ", "))
}

// startBinary starts the server binary at path on a free loopback port,
// with persistence off and the given extra arguments, and waits until it
// answers. A port is free when it is picked, not when the server binds it: a
// server that exits at start (its port taken meanwhile, by another test
// package's server or a client's connection) is started again on others, up
// to three times.
func startBinary(path string, extra ...string) (*Server, error) {
	version, _ := exec.Command(path, "--version").Output()
	origin := strings.TrimSpace(string(version))
	var err error
	for range 3 {
		var s *Server
		if s, err = startOnce(path, origin, extra); err == nil {
			return s, nil
		}
		if !errors.Is(err, errExited) {
			break
		}
	}
	return nil, err
}

func startOnce(path, origin string, extra []string) (*Server, error) {
	// A cluster node's bus listens on a port of its own, by default the
	// client port + 10,000: if that is taken, or above 65,535 (for a client
	// port above 55,535, a fifth of the ephemeral range), the node exits.
	// Redis 7 and Valkey take a free one as --cluster-port; older servers
	// get a client port of 55,535 or less.
	cluster := slices.Contains(extra, "--cluster-enabled")
	bus := cluster && clusterPort.MatchString(origin)
	free, err := freePorts(1+boolInt(bus), cluster && !bus)
	if err != nil {
		return nil, err
	}
	busPort := ""
	if bus {
		busPort = strconv.Itoa(free[1])
		extra = append(slices.Clip(extra), "--cluster-port", busPort)
	}
	dir, err := os.MkdirTemp("", "testserver-")
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", free[0]), Origin: origin, binary: path, dir: dir, extra: extra, bus: busPort}
	if err := s.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// clusterPort matches the version of a server that takes --cluster-port:
// Redis 7 or later, or Valkey.
var clusterPort = regexp.MustCompile(`^(Valkey server|Redis server v=([7-9]|[1-9][0-9])\.)`)

// errExited is a server that exited before it answered.
var errExited = errors.New("exited at start")

func (s *Server) start() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	args := []string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--protected-mode", "yes"}
	s.cmd = exec.Command(s.binary, append(args, s.extra...)...)
	tie(s.cmd)
	logPath := filepath.Join(s.dir, "server.log") // a file: no pipe for the server's forks to hold open
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close() // the server has its own descriptor
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.binary, err)
	}
	exited := make(chan struct{})
	s.exited = exited
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(exited) }(s.cmd)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { // on its own channel: a Restart makes s.exited anew while this may still run
		select {
		case <-exited:
			cancel() // no use waiting for an answer
		case <-ctx.Done():
		}
	}()
	if err := waitReady(ctx, s.Addr); err != nil {
		select {
		case <-s.exited:
			said, _ := os.ReadFile(logPath)
			return fmt.Errorf("%s on %s: %w: %s", s.binary, s.Addr, errExited, lastLines(said, 5))
		default:
		}
		s.kill()
		return err
	}
	return nil
}

// lastLines is the last n lines of text, on one line.
func lastLines(text []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(text)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// Stop stops a server this package started (an external one is left alone).
func (s *Server) Stop() {
	if s.cmd != nil {
		s.kill()
		os.RemoveAll(s.dir)
	}
}

// Kill stops a started server abruptly, keeping its port for Restart.
func (s *Server) Kill() error {
	if s.cmd == nil {
		return errors.New("testserver: only a server started from a binary can be killed")
	}
	s.kill()
	return nil
}

// Pause stops a started server with SIGSTOP: it keeps its connections and
// answers nothing until Resume, as a server stuck on a slow disk or in a
// long command does.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("testserver: only a server started from a binary can be signalled")
	}
	return s.cmd.Process.Signal(sig)
}

// Restart starts a killed server again on the same port, empty.
func (s *Server) Restart() error {
	if s.binary == "" {
		return errors.New("testserver: only a server started from a binary can be restarted")
	}
	return s.start()
}

func (s *Server) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
}
