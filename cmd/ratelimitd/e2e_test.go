package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// limits has one rule per algorithm, each limiting per user.
const limits = `
domain: e2e
descriptors:
  - key: fixed
    rate_limit: {unit: day, requests_per_unit: 7}
  - key: sliding
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: sliding}
  - key: counter
    rate_limit: {unit: hour, requests_per_unit: 6, algorithm: counter}
  - key: gcra
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: gcra, burst: 4}
`

// TestEndToEndOnEveryStore drives the built binary over gRPC, as Envoy
// does, with 64 concurrent callers on each algorithm: every key admits
// exactly its limit (a fixed window that a day boundary splits may admit
// its limit once per window it spans).
func TestEndToEndOnEveryStore(t *testing.T) {
	stores := map[string]func(t *testing.T) string{
		"memory": func(*testing.T) string { return "memory" },
		"redis":  func(t *testing.T) string { return "redis://" + testserver.Get(t, testserver.Redis).Addr },
		"valkey": func(t *testing.T) string { return "valkey://" + testserver.Get(t, testserver.Valkey).Addr },
		"redis cluster": func(t *testing.T) string {
			return "redis-cluster://" + strings.Join(testserver.GetCluster(t, testserver.RedisCluster).Addrs, ",")
		},
	}
	for _, name := range []string{"memory", "redis", "valkey", "redis cluster"} {
		t.Run(name, func(t *testing.T) {
			cfg := writeConfig(t, filepath.Join(t.TempDir(), "limits.yaml"), limits)
			// A budget far above a loaded machine's stalls: this test is about
			// exactness, and a timeout would hand decisions to the guard's
			// local fallback (tested on its own below).
			d := start(t, "-config", cfg, "-store", stores[name](t), "-timeout", "10s")
			if name != "memory" { // a guarded store: its breaker's gauge from the start
				_, metrics := d.get(t, "/metrics")
				assert.Contains(t, metrics, `ratelimit_breaker_state{store="store"} 0`)
			}
			run := fmt.Sprintf("%d", time.Now().UnixNano()) // keys of this run only, on a shared server
			want := map[string]int{"fixed": 7, "sliding": 5, "counter": 6, "gcra": 4}
			const users, callers = 8, 64
			var admitted [4][users]atomic.Int64
			algs := []string{"fixed", "sliding", "counter", "gcra"}
			var failures atomic.Int64
			var first atomic.Value
			began := time.Now()
			var wg sync.WaitGroup
			for c := 0; c < callers; c++ {
				wg.Add(1)
				go func(c int) {
					defer wg.Done()
					for i := 0; i < 12; i++ {
						a, u := (c+i)%4, (c/4+i)%users
						res, err := d.ask(context.Background(), "e2e", []string{algs[a], fmt.Sprintf("%s-u%d", run, u)})
						if err != nil {
							failures.Add(1)
							first.CompareAndSwap(nil, err.Error())
							continue
						}
						if res.OverallCode == rlsv3.RateLimitResponse_OK {
							admitted[a][u].Add(1)
						}
					}
				}(c)
			}
			wg.Wait()
			require.Zero(t, failures.Load(), "first failure: %v", first.Load())
			days := int(time.Now().UTC().Truncate(24*time.Hour).Sub(began.UTC().Truncate(24*time.Hour))/(24*time.Hour)) + 1
			for a, alg := range algs {
				for u := 0; u < users; u++ {
					got := int(admitted[a][u].Load())
					if alg == "fixed" {
						assert.GreaterOrEqual(t, got, want[alg], "%s user %d", alg, u)
						assert.LessOrEqual(t, got, want[alg]*days, "%s user %d over-admitted", alg, u)
						continue
					}
					assert.Equal(t, want[alg], got, "%s user %d", alg, u)
				}
			}
			res, err := d.ask(context.Background(), "e2e", []string{"sliding", run + "-u0"})
			require.NoError(t, err)
			st := res.Statuses[0]
			assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, st.Code)
			assert.Equal(t, uint32(5), st.CurrentLimit.RequestsPerUnit)
			assert.Equal(t, rlsv3.RateLimitResponse_RateLimit_HOUR, st.CurrentLimit.Unit)
			assert.Zero(t, st.LimitRemaining)
			assert.Greater(t, st.DurationUntilReset.AsDuration(), 50*time.Minute)
		})
	}
}

func TestHealthReadinessAndMetrics(t *testing.T) {
	d := start(t, "-config", "../../examples/ratelimitd.yaml")
	hc := healthpb.NewHealthClient(d.conn)
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		h, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		require.NoError(t, err)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, h.Status, svc)
	}
	code, _ := d.get(t, "/healthz")
	assert.Equal(t, 200, code)
	code, _ = d.get(t, "/readyz")
	assert.Equal(t, 200, code)
	_, err := d.ask(context.Background(), "api", []string{"user", "u1"})
	require.NoError(t, err)
	_, metrics := d.get(t, "/metrics")
	assert.Contains(t, metrics, `ratelimit_decisions_total{dry_run="false",policy="api.user",result="allowed",source="store"} 1`)
	assert.Contains(t, metrics, "ratelimit_memory_keys")
}

func TestBadRequestsGetClearStatusCodes(t *testing.T) {
	d := start(t, "-config", "../../examples/ratelimitd.yaml", "-unknown-domain", "notfound")
	for _, tc := range []struct {
		domain string
		ds     [][]string
		code   codes.Code
	}{
		{"nope", [][]string{{"user", "u"}}, codes.NotFound},
		{"", [][]string{{"user", "u"}}, codes.InvalidArgument},
		{"api", nil, codes.InvalidArgument},
		{"api", [][]string{{}}, codes.InvalidArgument},
	} {
		_, err := d.ask(context.Background(), tc.domain, tc.ds...)
		assert.Equal(t, tc.code, status.Code(err), "%v", err)
	}
	_, err := d.ask(context.Background(), "api", []string{"user", "still serving"})
	assert.NoError(t, err)
}

// By default an unknown domain is OK and counted, as envoyproxy/ratelimit
// answers it.
func TestAnUnknownDomainIsOKByDefault(t *testing.T) {
	d := start(t, "-config", "../../examples/ratelimitd.yaml")
	res, err := d.ask(context.Background(), "next-release", []string{"user", "u"})
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, res.OverallCode)
	_, metrics := d.get(t, "/metrics")
	assert.Contains(t, metrics, "ratelimitd_unknown_domain_requests_total 1")
}

// TestAConfigChangeAppliesAndABadOneIsRejected: the file is rewritten
// under a running daemon; the wait is for the daemon's poll, bounded
// generously (a loaded machine may take seconds), never asserted as a
// latency.
func TestAConfigChangeAppliesAndABadOneIsRejected(t *testing.T) {
	path := filepath.Join(t.TempDir(), "live.yaml")
	writeConfig(t, path, "domain: live\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	d := start(t, "-config", path, "-reload-every", "20ms")
	limitOf := func() uint32 {
		res, err := d.ask(context.Background(), "live", []string{"k", "v"})
		require.NoError(t, err)
		return res.Statuses[0].CurrentLimit.GetRequestsPerUnit()
	}
	require.Equal(t, uint32(1), limitOf())
	writeConfig(t, path, "domain: live\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 9}\n")
	require.Eventually(t, func() bool { return limitOf() == 9 }, time.Minute, 10*time.Millisecond, d.logs())

	writeConfig(t, path, "domain: live\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 3}\n")
	require.Eventually(t, func() bool { return strings.Contains(d.logs(), "configuration rejected") }, time.Minute, 10*time.Millisecond)
	assert.Contains(t, d.logs(), path+`:4: invalid rate limit unit \"fortnight\"`, "the file, line and problem")
	assert.Equal(t, uint32(9), limitOf(), "the previous configuration keeps serving")
}

func TestSIGTERMDrainsAndExitsCleanly(t *testing.T) {
	d := start(t, "-config", "../../examples/ratelimitd.yaml", "-drain", "5s")
	_, err := d.ask(context.Background(), "api", []string{"user", "u"})
	require.NoError(t, err)
	require.NoError(t, d.stop(time.Minute), "exit 0 after SIGTERM")
	assert.Contains(t, d.logs(), `"msg":"draining"`)
	assert.Contains(t, d.logs(), `"msg":"stopped"`)
}

// TestTheGuardDecidesWhileTheServerIsDown: the degraded mode is on by
// default on a server store; with -no-guard the error reaches Envoy.
func TestTheGuardDecidesWhileTheServerIsDown(t *testing.T) {
	srv := testserver.Own(t, testserver.Redis)
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "g.yaml"), "domain: g\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 4}\n")
	// A budget far above a loaded machine's stalls: the first request must
	// reach Redis (a timeout would have the guard decide it locally), and
	// once Redis is killed every call fails at once (connection refused).
	store := "redis://" + srv.Addr + "?max_retries=-1&dial_timeout=50ms"
	guarded := start(t, "-config", cfg, "-store", store, "-instances", "2", "-timeout", "10s")
	bare := start(t, "-config", cfg, "-store", store, "-no-guard", "-timeout", "10s")
	res, err := guarded.ask(context.Background(), "g", []string{"k", "v"})
	require.NoError(t, err)
	require.Equal(t, rlsv3.RateLimitResponse_OK, res.OverallCode)
	require.NoError(t, srv.Kill())

	admitted := 0
	for i := 0; i < 10; i++ {
		res, err := guarded.ask(context.Background(), "g", []string{"k", "v"})
		require.NoError(t, err, "the guard answers while the server is down")
		if res.OverallCode == rlsv3.RateLimitResponse_OK {
			admitted++
		}
	}
	assert.Equal(t, 4/2, admitted, "locally, a share of Limit/instances")
	_, err = bare.ask(context.Background(), "g", []string{"k", "v"})
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)

	// go-redis's own lines about the dead server come in the service's
	// format: they were plain text on stderr, whatever -log-format said.
	clientLines := 0
	for _, d := range []*daemon{guarded, bare} {
		for _, line := range strings.Split(strings.TrimSpace(d.logs()), "\n") {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &m), "a line not in JSON: %s", line)
			if m["client"] == "go-redis" {
				clientLines++
			}
		}
	}
	t.Logf("%d lines of go-redis's, in JSON", clientLines)
}

// On SIGTERM with -shutdown-delay, readiness fails first while requests are
// still served; the listeners close after the delay: the listeners once
// closed at once, refusing what a load balancer sent before it saw the pod
// not ready.
func TestSIGTERMFailsReadinessFirstAndServesThroughTheDelay(t *testing.T) {
	d := start(t, "-config", "../../examples/ratelimitd.yaml", "-shutdown-delay", "5s")
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		code, _ := d.get(t, "/readyz")
		if code == http.StatusServiceUnavailable {
			break
		}
		require.True(t, time.Now().Before(deadline), "readiness never failed")
	}
	_, err := d.ask(context.Background(), "api", []string{"user", "u"})
	require.NoError(t, err, "served while not ready")
	code, _ := d.get(t, "/healthz")
	assert.Equal(t, http.StatusOK, code)
	select {
	case err := <-d.exited:
		require.NoError(t, err, "exit 0")
	case <-time.After(time.Minute):
		t.Fatal("still running a minute after SIGTERM")
	}
	logs := d.logs()
	assert.Less(t, strings.Index(logs, `"msg":"not ready`), strings.Index(logs, `"msg":"draining"`), "not ready, then draining")
}
