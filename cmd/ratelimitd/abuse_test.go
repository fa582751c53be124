package main

import (
	"context"
	"strconv"
	"strings"
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
