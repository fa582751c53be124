package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/grpclimit"
)

// serve runs a real gRPC server (the standard health service) behind the
// interceptor, over an in-memory connection, and returns a client of it.
func serve(t *testing.T, i *grpclimit.Interceptor) healthpb.HealthClient {
	return serveHealth(t, i, health.NewServer())
}

// serveHealth is serve with h as the health service.
func serveHealth(t *testing.T, i *grpclimit.Interceptor, h healthpb.HealthServer) healthpb.HealthClient {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.UnaryInterceptor(i.Unary()), grpc.StreamInterceptor(i.Stream()))
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// serveTCP is serve over loopback TCP, where a peer has an IP address.
func serveTCP(t *testing.T, i *grpclimit.Interceptor) healthpb.HealthClient {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.UnaryInterceptor(i.Unary()), grpc.StreamInterceptor(i.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func limiter(t *testing.T, s backend.Store, p ratelimit.Policy, opts ...ratelimit.Option) *ratelimit.Limiter {
	l, err := ratelimit.New(s, p, opts...)
	require.NoError(t, err)
	return l
}

func memoryStore(t *testing.T) backend.Store {
	s, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// retryDelay is the RetryInfo detail of a denial.
func retryDelay(t *testing.T, err error) time.Duration {
	t.Helper()
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code(), "%v", err)
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	t.Fatalf("no RetryInfo in %v", st.Details())
	return 0
}

func TestUnaryCallsAreLimitedWithRetryInfo(t *testing.T) {
	l := limiter(t, memoryStore(t), ratelimit.PerMinute(2), ratelimit.WithName("per-token"))
	i, err := grpclimit.New([]grpclimit.Rule{{Limiter: l, Key: grpclimit.Metadata("x-api-token")}})
	require.NoError(t, err)
	client := serve(t, i)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-token", "t1")
	for n := 0; n < 2; n++ {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err, "call %d of 2", n+1)
	}
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
	delay := retryDelay(t, err)
	require.Greater(t, delay, 59*time.Second, "until the oldest call leaves the minute")
	require.LessOrEqual(t, delay, time.Minute)
	require.Contains(t, status.Convert(err).Message(), "per-token")

	other := metadata.AppendToOutgoingContext(context.Background(), "x-api-token", "t2")
	_, err = client.Check(other, &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "another token has its own quota")

	_, err = client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "no token: no key, as httplimit's 400")
}

func TestStreamsAreDecidedWhenTheyOpen(t *testing.T) {
	l := limiter(t, memoryStore(t), ratelimit.PerMinute(1))
	i, err := grpclimit.New([]grpclimit.Rule{{Limiter: l, Key: grpclimit.Method()}})
	require.NoError(t, err)
	client := serve(t, i)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err, "the first stream opens and gets its first message")
	second, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = second.Recv()
	require.Positive(t, retryDelay(t, err), "the second is refused at its start")
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "another method has its own key")
}

// Several rules, as ratelimit.Multi: the peer and a tenant; a denial by one
// takes nothing from the other.
func TestSeveralRules(t *testing.T) {
	s := memoryStore(t)
	perPeer := limiter(t, s, ratelimit.PerMinute(10), ratelimit.WithName("per-peer"), ratelimit.WithPrefix("peer:"))
	perTenant := limiter(t, s, ratelimit.PerMinute(1), ratelimit.WithName("per-tenant"), ratelimit.WithPrefix("tenant:"))
	i, err := grpclimit.New([]grpclimit.Rule{{Limiter: perPeer, Key: grpclimit.PeerIP()}, {Limiter: perTenant, Key: grpclimit.Metadata("tenant")}})
	require.NoError(t, err)
	client := serveTCP(t, i)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "tenant", "acme")
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
	require.Contains(t, status.Convert(err).Message(), "per-tenant")
	require.Positive(t, retryDelay(t, err))
	d, err := perPeer.Peek(context.Background(), "127.0.0.1")
	require.NoError(t, err)
	require.Equal(t, 1, d.Count, "the peer, keyed by its address, lost nothing to the tenant's denial")
}

// A store that fails: closed by default (Unavailable), open when the
// Limiter says so; the error handler can change the status.
func TestFailureModes(t *testing.T) {
	cancelled := func() context.Context { ctx, cancel := context.WithCancel(context.Background()); cancel(); return ctx }
	for _, open := range []bool{false, true} {
		opts := []ratelimit.Option{ratelimit.WithTimeout(time.Second)}
		if open {
			opts = append(opts, ratelimit.WithFailOpen())
		}
		l := limiter(t, failingStore{}, ratelimit.PerMinute(1), opts...)
		i, err := grpclimit.New([]grpclimit.Rule{{Limiter: l, Key: grpclimit.Method()}})
		require.NoError(t, err)
		_, err = i.Unary()(cancelled(), nil, &grpc.UnaryServerInfo{FullMethod: "/s/M"}, func(context.Context, any) (any, error) { return "ok", nil })
		if open {
			require.NoError(t, err, "fail open lets the call through")
		} else {
			require.Equal(t, codes.Unavailable, status.Code(err), "fail closed: %v", err)
			require.NotContains(t, status.Convert(err).Message(), errDown.Error(), "the store's own error stays out of the client's answer")
		}
	}
	l := limiter(t, failingStore{}, ratelimit.PerMinute(1))
	i, err := grpclimit.New([]grpclimit.Rule{{Limiter: l, Key: grpclimit.Method()}},
		grpclimit.WithErrorHandler(func(_ context.Context, err error) error { return status.Error(codes.Internal, err.Error()) }))
	require.NoError(t, err)
	_, err = i.Unary()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/s/M"}, nil)
	require.Equal(t, codes.Internal, status.Code(err))

	_, err = grpclimit.New([]grpclimit.Rule{{Key: grpclimit.Method()}})
	require.ErrorIs(t, err, ratelimit.ErrInvalidArgument)
}

// failingStore is a store whose server is gone.
type failingStore struct{ backend.Unimplemented }

var errDown = errors.New("connection refused")

func (failingStore) Take(context.Context, backend.Request) (backend.Outcome, error) {
	return backend.Outcome{}, errDown
}
func (failingStore) Peek(context.Context, backend.Request) (backend.Outcome, error) {
	return backend.Outcome{}, errDown
}
func (failingStore) Reset(context.Context, string, string) error { return errDown }

func TestKeyFuncs(t *testing.T) {
	ctx := context.Background()
	_, err := grpclimit.Metadata("x")(ctx, "/s/M")
	require.ErrorIs(t, err, grpclimit.ErrNoKey)
	_, err = grpclimit.PeerIP()(ctx, "/s/M")
	require.ErrorIs(t, err, grpclimit.ErrNoKey)
	type userKey struct{}
	_, err = grpclimit.FromContext(userKey{})(ctx, "/s/M")
	require.ErrorIs(t, err, grpclimit.ErrNoKey)
	k, err := grpclimit.FromContext(userKey{})(context.WithValue(ctx, userKey{}, "alice"), "/s/M")
	require.NoError(t, err)
	require.Equal(t, "alice", k)
}

// grpc-go's own retry never reads RetryInfo: under a retryPolicy that
// lists RESOURCE_EXHAUSTED it retried after its own backoff (all 5 attempts
// in 0.62s while RetryInfo said 9.4s). It obeys the trailer
// grpc-retry-pushback-ms, which the interceptor now sends: with a backoff
// of 10ms and 2 attempts, the second call succeeds, its retry sent once
// the window freed the quota.
func TestGrpcGoRetriesAfterThePushback(t *testing.T) {
	const window = 300 * time.Millisecond
	i, err := grpclimit.New([]grpclimit.Rule{{Limiter: limiter(t, memoryStore(t), ratelimit.Policy{Limit: 1, Window: window}), Key: grpclimit.Method()}})
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.UnaryInterceptor(i.Unary()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}],
			"retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.01s", "maxBackoff": "0.01s", "backoffMultiplier": 1,
			"retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	client := healthpb.NewHealthClient(conn)

	ctx := context.Background()
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "the first call is admitted")
	admitted := time.Now()
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "the retry waited for the pushback, and was admitted")
	require.GreaterOrEqual(t, time.Since(admitted), window-10*time.Millisecond, "no earlier than the window allowed")
}
