package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// binary is ratelimitd built once for the package's tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ratelimitd-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "ratelimitd")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	testserver.Main(m)
}

// daemon is a running ratelimitd.
type daemon struct {
	cmd               *exec.Cmd
	grpc, http, admin string
	client            rlsv3.RateLimitServiceClient
	conn              *grpc.ClientConn
	mu                sync.Mutex
	log               bytes.Buffer // its stderr, JSON lines
	exited            chan error
}

// start runs ratelimitd with args on free loopback ports, waits until it
// says it is serving, and stops it (SIGTERM, exit 0 expected) when t ends.
func start(t *testing.T, args ...string) *daemon {
	t.Helper()
	args = append([]string{"-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0", "-log-format", "json"}, args...)
	return startWith(t, []string{"RATELIMITD_LOG_LEVEL=debug"}, nil, args...)
}

// startWith is start with env added to the process's environment, no
// default arguments, and the gRPC client dialled with creds (nil: none).
func startWith(t *testing.T, env []string, creds credentials.TransportCredentials, args ...string) *daemon {
	t.Helper()
	d := &daemon{exited: make(chan error, 1)}
	d.cmd = exec.Command(binary, args...)
	// The admin listener on a free port too, unless the test says where.
	d.cmd.Env = append(append(os.Environ(), "RATELIMITD_ADMIN=127.0.0.1:0"), env...)
	stderr, err := d.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, d.cmd.Start())
	serving := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			d.mu.Lock()
			d.log.Write(sc.Bytes())
			d.log.WriteByte('\n')
			d.mu.Unlock()
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == "serving" {
				serving <- line
			}
		}
		d.exited <- d.cmd.Wait()
	}()
	select {
	case line := <-serving:
		d.grpc, d.http, d.admin = line["grpc"].(string), line["http"].(string), line["admin"].(string)
	case err := <-d.exited:
		t.Fatalf("ratelimitd %v exited before serving: %v\n%s", args, err, d.logs())
	case <-time.After(60 * time.Second):
		d.cmd.Process.Kill()
		t.Fatalf("ratelimitd %v did not serve within a minute\n%s", args, d.logs())
	}
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	d.conn, err = grpc.NewClient(d.grpc, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	d.client = rlsv3.NewRateLimitServiceClient(d.conn)
	t.Cleanup(func() {
		d.conn.Close()
		if d.cmd.ProcessState == nil {
			require.NoError(t, d.stop(time.Minute), d.logs())
		}
	})
	return d
}

// stop sends SIGTERM and waits up to bound for a clean exit.
func (d *daemon) stop(bound time.Duration) error {
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case err := <-d.exited:
		return err
	case <-time.After(bound):
		d.cmd.Process.Kill()
		return fmt.Errorf("still running %v after SIGTERM", bound)
	}
}

func (d *daemon) logs() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

// ask sends one ShouldRateLimit of one descriptor per entry list.
func (d *daemon) ask(ctx context.Context, domain string, descriptors ...[]string) (*rlsv3.RateLimitResponse, error) {
	in := &rlsv3.RateLimitRequest{Domain: domain}
	for _, kv := range descriptors {
		var ds rlv3.RateLimitDescriptor
		for i := 0; i+1 < len(kv); i += 2 {
			ds.Entries = append(ds.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		in.Descriptors = append(in.Descriptors, &ds)
	}
	return d.client.ShouldRateLimit(ctx, in)
}

// get is an HTTP GET of the daemon's path: its status and body.
func (d *daemon) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + d.http + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// writeConfig writes a configuration file in a test's directory.
func writeConfig(t *testing.T, path, yaml string) string {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(strings.TrimLeft(yaml, "\n")), 0o644))
	return path
}
