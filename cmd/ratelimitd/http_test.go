package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Connections that send nothing are closed by the server: 400 idle or
// body-less connections were once all still held after 25 s.
func TestIdleHTTPConnectionsAreClosed(t *testing.T) {
	d := start(t, "-config", "../../examples/ratelimitd.yaml", "-http-timeout", "300ms", "-http-idle-timeout", "300ms")
	var conns []net.Conn
	for i := 0; i < 8; i++ {
		c, err := net.Dial("tcp", d.http)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
	}
	half, err := net.Dial("tcp", d.http) // headers never finished
	require.NoError(t, err)
	t.Cleanup(func() { half.Close() })
	_, err = half.Write([]byte("POST /v1/allow HTTP/1.1\r\nHost: x\r\n"))
	require.NoError(t, err)
	conns = append(conns, half)
	began := time.Now()
	for i, c := range conns {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
		_, err := io.ReadAll(c) // returns when the server closes it
		require.NoError(t, err, "connection %d: closed by the server, not by the test's deadline", i)
	}
	t.Logf("%d connections closed by the server within %v of a 300ms timeout", len(conns), time.Since(began))
}

// At -http-max-conns, further HTTP connections wait to be accepted, while
// the gRPC listener (Envoy's, and gRPC health) is served.
func TestTheHTTPConnectionCapLeavesGRPCServed(t *testing.T) {
	// A minute's -http-timeout: the held connections stay held however
	// long a loaded machine takes to reach the fourth.
	d := start(t, "-config", "../../examples/ratelimitd.yaml", "-http-max-conns", "3", "-http-timeout", "1m")
	var held []net.Conn
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", d.http)
		require.NoError(t, err)
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	quick := &http.Client{Timeout: 300 * time.Millisecond}
	_, err := quick.Get("http://" + d.http + "/healthz")
	require.Error(t, err, "a fourth connection waits")

	h, err := healthpb.NewHealthClient(d.conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, h.Status)
	_, err = d.ask(context.Background(), "api", []string{"user", "u1"})
	require.NoError(t, err, "Envoy's requests are answered")

	held[0].Close()
	held = held[1:]
	resp, err := http.Get("http://" + d.http + "/healthz")
	require.NoError(t, err, "a freed slot serves the next connection")
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
}

// Liveness, readiness and metrics have a listener of their own (-admin):
// with every connection -http may hold taken by clients that never finish
// their headers, /healthz there once answered 0 of 18 probes within 1 s,
// enough for Kubernetes to restart a healthy pod.
func TestProbesAnswerWhileSlowClientsHoldTheHTTPPort(t *testing.T) {
	d := start(t, "-config", "../../examples/ratelimitd.yaml", "-http-max-conns", "16", "-http-timeout", "1m")
	for i := 0; i < 100; i++ {
		c, err := net.Dial("tcp", d.http)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		_, _ = c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n")) // never finished
	}
	quick := &http.Client{Timeout: 300 * time.Millisecond}
	_, err := quick.Get("http://" + d.http + "/healthz")
	require.Error(t, err, "the public port is full")
	probe := &http.Client{Timeout: time.Second}
	for i, path := range []string{"/healthz", "/readyz", "/healthcheck", "/metrics"} {
		for j := 0; j < 5; j++ {
			resp, err := probe.Get("http://" + d.admin + path)
			require.NoError(t, err, "%s, probe %d", path, i*5+j)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, path)
		}
	}
}
