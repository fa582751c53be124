package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// REDIS_TYPE=sentinel, as envoyproxy/ratelimit reads it ("master,
// sentinel..." in REDIS_URL): ratelimitd asks a real Redis Sentinel for the
// master and decides there.
func TestSentinelFromEnvoyproxysEnvironment(t *testing.T) {
	master := testserver.Own(t, testserver.Redis)
	c := goredis.NewClient(&goredis.Options{Addr: master.Addr})
	defer c.Close()
	require.NoError(t, c.ConfigSet(context.Background(), "requirepass", "m4ster").Err()) // after the server's own readiness check
	sentinel := startSentinel(t, master.Addr, "m4ster")

	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	writeConfig(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")
	d := startWith(t, []string{
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "REDIS_TYPE=sentinel", "REDIS_URL=mymaster," + sentinel,
		"REDIS_AUTH=m4ster", "HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "LOG_FORMAT=json",
	}, nil)
	var codes []rlsv3.RateLimitResponse_Code
	for range 3 {
		res, err := d.ask(context.Background(), "edge", []string{"k", "v"})
		require.NoError(t, err)
		codes = append(codes, res.GetOverallCode())
	}
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}, codes)
	c = goredis.NewClient(&goredis.Options{Addr: master.Addr, Password: "m4ster"})
	defer c.Close()
	keys, err := c.Keys(context.Background(), "ratelimitd:*").Result()
	require.NoError(t, err)
	assert.NotEmpty(t, keys, "the state is on the master the sentinel named")
	assert.NotContains(t, d.logs(), "m4ster", "the master's password stays out of the logs")
}

// startSentinel runs a Redis Sentinel watching the master at addr (its
// password pass) on a free loopback port, until t ends; its address.
func startSentinel(t *testing.T, addr, pass string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	host, mport, _ := net.SplitHostPort(addr)
	conf := filepath.Join(t.TempDir(), "sentinel.conf") // a sentinel rewrites its file
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("port %d\nbind 127.0.0.1\nsentinel monitor mymaster %s %s 1\nsentinel auth-pass mymaster %s\n", port, host, mport, pass)), 0o600))
	cmd := exec.Command("redis-server", conf, "--sentinel")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sentinel := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c := goredis.NewSentinelClient(&goredis.Options{Addr: sentinel})
	defer c.Close()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if a, err := c.GetMasterAddrByName(context.Background(), "mymaster").Result(); err == nil && len(a) == 2 {
			return sentinel
		}
		require.True(t, time.Now().Before(deadline), "the sentinel did not name its master within a minute")
	}
}
