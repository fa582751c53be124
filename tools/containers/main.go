// Command containers runs a command with REDIS_ADDR and VALKEY_ADDR naming
// throwaway Redis and Valkey containers, for a machine with a Docker engine
// and no server binaries:
//
//	go run ./tools/containers go test -race -count=1 ./...
//
// It starts the images redis and valkey/valkey (tag latest) on the Docker
// engine that DOCKER_HOST names (or the local one), waits until both answer
// PING, runs the command with the two variables set, and removes the
// containers, returning the command's exit status. Containers left behind by
// a crash expire after ten minutes.
//
// It is a module of its own: the Docker client is a dependency of this tool
// only, not of the library, its tests or the bench.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/ory/dockertest/v3"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: go run ./tools/containers command [args...]")
		os.Exit(2)
	}
	code, err := run(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "containers:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(command []string) (int, error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return 0, fmt.Errorf("docker: %w", err)
	}
	if err := pool.Client.Ping(); err != nil {
		return 0, fmt.Errorf("no Docker engine answers: %w", err)
	}
	env := os.Environ()
	for _, c := range []struct{ image, variable string }{{"redis", "REDIS_ADDR"}, {"valkey/valkey", "VALKEY_ADDR"}} {
		res, err := pool.Run(c.image, "latest", nil)
		if err != nil {
			return 0, fmt.Errorf("docker run %s: %w", c.image, err)
		}
		defer func() { _ = pool.Purge(res) }()
		_ = res.Expire(600)
		addr := "127.0.0.1:" + res.GetPort("6379/tcp")
		if err := waitReady(addr, 30*time.Second); err != nil {
			return 0, fmt.Errorf("%s: %w", c.image, err)
		}
		env = append(env, c.variable+"="+addr)
		fmt.Fprintf(os.Stderr, "containers: %s=%s (%s)\n", c.variable, addr, c.image)
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Env = os.Stdin, os.Stdout, os.Stderr, env
	var exit *exec.ExitError
	if err := cmd.Run(); errors.As(err, &exit) {
		return exit.ExitCode(), nil
	} else if err != nil {
		return 0, err
	}
	return 0, nil
}

// waitReady sends PING to addr until it answers PONG.
func waitReady(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			_, err = c.Write([]byte("*1\r\n$4\r\nPING\r\n"))
			var line string
			if err == nil {
				line, err = bufio.NewReader(c).ReadString('\n')
			}
			c.Close()
			if err == nil && strings.HasPrefix(line, "+PONG") {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %v: %v", within, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
