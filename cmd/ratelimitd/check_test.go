package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// ratelimitd -check PATH is an offline validator, as envoyproxy/ratelimit's
// config_check_cmd: the rules on stdout and exit 0, or the file, line and
// problem on stderr and exit 1.
func TestCheckValidatesAConfigurationOffline(t *testing.T) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(binary, "-check", filepath.Join(upstream, "examples-config"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	assert.Contains(t, stdout.String(), "rl.service_service_1: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: true\n")
	assert.Contains(t, stdout.String(), "ok: "+filepath.Join(upstream, "examples-config")+": 2 files, 2 domains, 19 rules\n")

	stdout.Reset()
	stderr.Reset()
	cmd = exec.Command(binary, "-check", filepath.Join(upstream, "test-config", "misspelled_key.yaml"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var exit *exec.ExitError
	require.True(t, errors.As(cmd.Run(), &exit))
	assert.Equal(t, 1, exit.ExitCode())
	assert.Contains(t, stderr.String(), "misspelled_key.yaml:")
	assert.Contains(t, stderr.String(), "unknown key")
	assert.Empty(t, stdout.String())
}

// The admin listener's /rlconfig lists the rules in force, as
// envoyproxy/ratelimit's debug port does, and gRPC health answers for the
// service name it registers ("ratelimit").
func TestTheAdminListenerListsTheRulesAndHealthAnswersUpstreamsName(t *testing.T) {
	d := start(t, "-config", filepath.Join(upstream, "examples-config"))
	resp, err := http.Get("http://" + d.admin + "/rlconfig")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), "rl.foo.bar: unit=MINUTE requests_per_unit=3, shadow_mode: false, quota_mode: false\n")
	for _, name := range []string{"", "ratelimit", "envoy.service.ratelimit.v3.RateLimitService"} {
		res, err := healthpb.NewHealthClient(d.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
		require.NoError(t, err, "%q", name)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, res.GetStatus(), "%q", name)
	}
}

// Started without its configuration (-start-without-config, as
// envoyproxy/ratelimit serves a missing directory), the service serves no
// domain and, with -healthy-needs-domain (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED),
// is not ready until a configuration with a domain is applied.
func TestNotReadyUntilADomainIsConfigured(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "config")
	d := start(t, "-config", dir, "-start-without-config", "-healthy-needs-domain", "-reload-every", "20ms", "-reload-settle", "0s")
	health := healthpb.NewHealthClient(d.conn)
	status := func() healthpb.HealthCheckResponse_ServingStatus {
		res, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
		require.NoError(t, err)
		return res.GetStatus()
	}
	code, body := d.get(t, "/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "no domain configured")
	assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, status())
	res, err := d.ask(context.Background(), "edge", []string{"k", "v"})
	require.NoError(t, err, "served meanwhile, every domain unknown")
	assert.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())

	require.NoError(t, os.MkdirAll(dir, 0o755))
	writeConfig(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	for deadline := time.Now().Add(time.Minute); status() != healthpb.HealthCheckResponse_SERVING; time.Sleep(10 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "not serving within a minute of the file")
	}
	code, _ = d.get(t, "/healthcheck")
	assert.Equal(t, http.StatusOK, code)
	res, err = d.ask(context.Background(), "edge", []string{"k", "v"})
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	res, err = d.ask(context.Background(), "edge", []string{"k", "v"})
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetOverallCode(), "the configuration applies")
}
