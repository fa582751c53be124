package grpclimit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/grpclimit"
)

// reporting is a health service whose handlers report the usage the
// client's "tokens" metadata says (a model's tokens, known once it answers).
type reporting struct {
	healthpb.UnimplementedHealthServer
}

func tokensOf(ctx context.Context) int {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("tokens"); len(v) > 0 {
		n, _ := strconv.Atoi(v[0])
		return n
	}
	return 0
}

func (reporting) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	grpclimit.ReportUsage(ctx, tokensOf(ctx))
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (reporting) Watch(_ *healthpb.HealthCheckRequest, ss healthpb.Health_WatchServer) error {
	grpclimit.ReportUsage(ss.Context(), tokensOf(ss.Context()))
	return ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
}

// A Usage rule checks each call against a token budget (taking nothing) and
// charges what the handler reported once it returns, for unary calls and
// streams alike; the call that finds the budget spent is refused.
func TestAUsageRuleChargesWhatTheHandlerReports(t *testing.T) {
	tokens := limiter(t, memoryStore(t), ratelimit.TokenBucket(1000, time.Minute, 1000), ratelimit.WithName("tokens"))
	i, err := grpclimit.New([]grpclimit.Rule{{Limiter: tokens, Key: grpclimit.Method(), Usage: true}})
	require.NoError(t, err)
	client := serveHealth(t, i, reporting{})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "tokens", "400")

	var codesSeen []codes.Code
	for range 4 {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		codesSeen = append(codesSeen, status.Code(err))
	}
	require.Equal(t, []codes.Code{codes.OK, codes.OK, codes.OK, codes.ResourceExhausted}, codesSeen, "checked at 0, 400, 800: then spent")
	d, err := tokens.Peek(context.Background(), "/grpc.health.v1.Health/Check")
	require.NoError(t, err)
	require.Equal(t, 1200, d.Count, "what the handlers reported")

	stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		d, err := tokens.Peek(context.Background(), "/grpc.health.v1.Health/Watch")
		return err == nil && d.Count == 400
	}, 5*time.Second, time.Millisecond, "a stream's usage, charged when it ends")
}

// waiting is a health service whose Watch stream stays open until told.
type waiting struct {
	healthpb.UnimplementedHealthServer
	entered chan struct{}
	leave   chan struct{}
}

func (w waiting) Watch(_ *healthpb.HealthCheckRequest, ss healthpb.Health_WatchServer) error {
	w.entered <- struct{}{}
	<-w.leave
	return ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
}

// A rule of an InFlight policy holds a permit while a stream is open: with
// one stream open under a limit of one, a second is refused with
// ResourceExhausted, and once the first ends, the next opens. The stream
// the permits refused takes nothing from the rate beside them (it once
// did: the rates decided first).
func TestAnInFlightRuleHoldsAPermitWhileAStreamIsOpen(t *testing.T) {
	s := memoryStore(t)
	streams := limiter(t, s, ratelimit.Concurrency(1, time.Minute), ratelimit.WithName("streams"))
	perMinute := limiter(t, s, ratelimit.PerMinute(100), ratelimit.WithName("per-minute"))
	i, err := grpclimit.New([]grpclimit.Rule{{Limiter: streams, Key: grpclimit.Method()}, {Limiter: perMinute, Key: grpclimit.Method()}})
	require.NoError(t, err)
	w := waiting{entered: make(chan struct{}, 2), leave: make(chan struct{})}
	client := serveHealth(t, i, w)
	ctx := context.Background()

	first, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	<-w.entered
	second, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = second.Recv()
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "one stream open: no permit left")
	w.leave <- struct{}{}
	_, err = first.Recv()
	require.NoError(t, err)
	_, err = first.Recv() // the end of the stream: its permit given back
	require.Error(t, err)
	require.Eventually(t, func() bool {
		d, err := streams.Peek(ctx, "/grpc.health.v1.Health/Watch")
		return err == nil && d.Count == 0
	}, 5*time.Second, time.Millisecond)
	third, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	<-w.entered
	close(w.leave)
	_, err = third.Recv()
	require.NoError(t, err)
	d, err := perMinute.Peek(ctx, "/grpc.health.v1.Health/Watch")
	require.NoError(t, err)
	require.Equal(t, 2, d.Count, "two streams opened; the refused one took nothing from the rate")
}
