package grpclimit_test

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/grpclimit"
)

// Two calls per minute per API token, in front of a gRPC server: the third
// fails with ResourceExhausted.
func Example() {
	store, err := memory.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, _ := ratelimit.New(store, ratelimit.PerMinute(2), ratelimit.WithName("per-token"))
	limit, _ := grpclimit.New([]grpclimit.Rule{{Limiter: limiter, Key: grpclimit.Metadata("x-api-token")}})

	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.UnaryInterceptor(limit.Unary()), grpc.StreamInterceptor(limit.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, _ := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-token", "t1")
	for i := 1; i <= 3; i++ {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		fmt.Printf("call %d: %v\n", i, status.Code(err))
	}
	// Output:
	// call 1: OK
	// call 2: OK
	// call 3: ResourceExhausted
}
