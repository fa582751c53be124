package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// A request of 50,000 descriptors is refused at once, for little of the
// service's CPU: matching was quadratic (60,000 descriptors, 15.6 s of
// CPU), and four clients looping such requests moved ordinary requests from
// p99 6.9 ms to 252 ms, past Envoy's 20 ms timeout.
func TestHugeRequestsAreRefusedCheaply(t *testing.T) {
	d := start(t, "-config", "../../examples/ratelimitd.yaml")
	huge := &rlsv3.RateLimitRequest{Domain: "api"}
	for i := 0; i < 50_000; i++ {
		huge.Descriptors = append(huge.Descriptors, &rlv3.RateLimitDescriptor{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u" + strconv.Itoa(i)}}})
	}
	_, err := d.client.ShouldRateLimit(context.Background(), huge)
	require.Error(t, err)
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)

	// The service's CPU per huge request, from its own metrics (CPU time,
	// which a loaded machine does not inflate as it does wall time): the
	// bytes are encoded once here, on a connection of their own.
	payload, err := proto.Marshal(huge)
	require.NoError(t, err)
	attacker, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer attacker.Close()
	const n = 20
	before := cpuSeconds(t, d)
	for i := 0; i < n; i++ {
		var reply []byte
		err := attacker.Invoke(context.Background(), rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, payload, &reply, grpc.ForceCodec(rawCodec{}))
		require.Error(t, err)
	}
	perRequest := time.Duration((cpuSeconds(t, d) - before) / n * float64(time.Second))
	t.Logf("%d requests of 50,000 descriptors (%d bytes): %v of the service's CPU each", n, len(payload), perRequest)
	assert.Less(t, perRequest, 250*time.Millisecond, "60,000 descriptors once took 15.6 s")
	_, err = d.ask(context.Background(), "api", []string{"user", "ordinary"})
	require.NoError(t, err, "ordinary requests are served")
}

// cpuSeconds is the service's process_cpu_seconds_total.
func cpuSeconds(t *testing.T, d *daemon) float64 {
	_, metrics := d.get(t, "/metrics")
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	t.Fatal("no process_cpu_seconds_total")
	return 0
}

// rawCodec sends bytes already encoded, and keeps a reply's bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = data
	return nil
}
func (rawCodec) Name() string { return "proto" }

// A client whose deadline is shorter than a healthy Redis needs opens
// nothing: its requests fail by its own deadline, the guard's breaker stays
// closed, and every other client's decisions stay the store's. (A client
// with 300 µs deadlines once sent 3,990 decisions of others to the local
// fallback.) The store's budget is generous here: on a machine busy enough
// to stall a healthy Redis past 100 ms five times in a row (CI under load
// once did), the breaker would rightly open, and that is not this test's
// subject.
func TestAShortDeadlineOpensNoBreaker(t *testing.T) {
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "limits.yaml"), `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000}
`)
	d := start(t, "-config", cfg, "-store", "redis://"+testserver.Get(t, testserver.Redis).Addr, "-timeout", "10s")
	var hurried atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Microsecond)
				if _, err := d.ask(ctx, "api", []string{"user", "hurried"}); err != nil {
					hurried.Add(1)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d of 3,200 requests with a 300 µs deadline missed it", hurried.Load())
	_, metrics := d.get(t, "/metrics")
	assert.True(t, strings.Contains(metrics, `ratelimit_breaker_state{store="store"} 0`), "the breaker stays closed:\n%s", lines(metrics, "ratelimit_breaker"))
	assert.False(t, strings.Contains(metrics, `source="fallback"`), "no decision went to the fallback:\n%s", lines(metrics, "ratelimit_decisions_total"))
	res, err := d.ask(context.Background(), "api", []string{"user", "patient"})
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, res.OverallCode)
}

// lines are the lines of text that start with prefix.
func lines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// floodStreams opens one HTTP/2 connection to the gRPC listener at addr and
// starts n streams of ShouldRateLimit on it that never send their message
// (or, with reset, that are cancelled at once: the rapid reset), as fast as
// the server reads them; the connection is closed when t ends. It returns
// once every stream was sent or the server stopped reading for a second.
func floodStreams(t *testing.T, addr string, n int, reset bool) {
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_, err = c.Write([]byte(http2.ClientPreface))
	require.NoError(t, err)
	fr := http2.NewFramer(c, c)
	var mu sync.Mutex // the framer's writes, from two goroutines
	require.NoError(t, fr.WriteSettings())
	go func() { // the server's frames (settings, refusals), read and dropped
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
				mu.Lock()
				_ = fr.WriteSettingsAck()
				mu.Unlock()
			}
		}
	}()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for i := 0; i < n; i++ {
		block.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", addr},
			{":path", rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
			require.NoError(t, enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}))
		}
		id := uint32(2*i + 1)
		mu.Lock()
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true})
		if err == nil && reset {
			err = fr.WriteRSTStream(id, http2.ErrCodeCancel)
		}
		mu.Unlock()
		if err != nil {
			return // the server stopped reading: its bound holds the rest back
		}
	}
}

// metric is the value of the daemon's metric line that starts with name
// and a space, from its admin listener.
func (d *daemon) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + d.admin + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// One gRPC connection holds at most -grpc-max-streams streams: 20,000
// streams that never send their message, on one connection, once made
// 20,000 goroutines (200,000 took the service to 1.29 GB and 172k
// goroutines, and an ordinary decision from 2.8 ms to 236 ms). The rapid
// reset (each stream cancelled at once) is bounded the same way.
func TestOneConnectionCannotHoldUnboundedStreams(t *testing.T) {
	for _, reset := range []bool{false, true} {
		d := start(t, "-config", "../../examples/ratelimitd.yaml", "-grpc-max-streams", "50")
		_, err := d.ask(context.Background(), "api", []string{"user", "ordinary"})
		require.NoError(t, err)
		before := d.metric(t, "go_goroutines")
		cpu := d.metric(t, "process_cpu_seconds_total")
		floodStreams(t, d.grpc, 200_000, reset)
		during := 0.0
		for i := 0; i < 20; i++ { // the most while the server works through what it read
			during = max(during, d.metric(t, "go_goroutines"))
			time.Sleep(25 * time.Millisecond)
		}
		t.Logf("reset %v: %v goroutines before, %v with the flood's connection open; %.2f s of CPU", reset, before, during, d.metric(t, "process_cpu_seconds_total")-cpu)
		assert.Less(t, during, before+200, "reset %v: the connection's streams are bounded", reset)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = d.ask(ctx, "api", []string{"user", "ordinary"})
		cancel()
		require.NoError(t, err, "reset %v: an ordinary decision on another connection", reset)
	}
}
