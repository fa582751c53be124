package main

import (
	"context"
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
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ratelimit-go/ratelimit/internal/testserver"
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
// fallback.)
func TestAShortDeadlineOpensNoBreaker(t *testing.T) {
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "limits.yaml"), `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000}
`)
	d := start(t, "-config", cfg, "-store", "redis://"+testserver.Get(t, testserver.Redis).Addr)
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
