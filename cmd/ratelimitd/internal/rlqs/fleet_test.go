package rlqs

import (
	"context"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/rlqs/rlqstest"
)

// Twenty planes on one bucket of a rule of 1,000 a second, their demand
// summing to about 5x it, skewed, shifting every 10 intervals, one plane
// killed mid-run: each interval (a second) the fleet admits at most the
// limit and the documented bound (a tenth of each grant, its token
// bucket's size); from the fourth interval after a shift, the third after
// the first reports of the new demand (the planes report in turn, the
// first seeing the others' old demand, and a lowered grant's old one
// counts until the plane's second report after it; a raise follows at the
// raised plane's next report) the fleet admits 90% at
// least of its max-min fair shares of the demand, and a plane asking less
// than its share 90% at least of its ask. The service's calls (reports)
// per admitted request are 100x fewer than RLS's (a call a request) at
// least (the immediate reports after a changed assignment counted).
func TestAFleetKeepsTheLimitSplitByDemand(t *testing.T) {
	cfg, err := config.Parse("fleet.yaml", []byte("domain: fleet\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 1000}\n"))
	require.NoError(t, err)
	const limit, planes, interval = 1000, 20, time.Second
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	srv := NewServer(func() *config.Config { return cfg }, NewMemoryLedger(func() time.Time { return now }), interval*3/2)
	addr := serve(t, srv)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	client := rlqsv3.NewRateLimitQuotaServiceClient(conn)
	var reports, requests, admittedAll int // RLQS's calls; RLS's would be one a request
	report := func(p *rlqstest.Plane, elapsed time.Duration) {
		sent, err := p.Report(elapsed)
		require.NoError(t, err)
		reports += sent
	}
	fleet := make([]*rlqstest.Plane, planes)
	for i := range fleet {
		stream, err := client.StreamRateLimitQuotas(context.Background())
		require.NoError(t, err)
		fleet[i] = &rlqstest.Plane{Stream: stream, Domain: "fleet", Bucket: &rlqsv3.BucketId{Bucket: map[string]string{"tenant": "acme"}},
			Clock: func() time.Time { return now }}
		report(fleet[i], 0) // the bucket's first report
	}

	rng := rand.New(rand.NewPCG(7, 8))
	demands := make([]int, planes)
	alive := planes
	for s := range 60 {
		if s%10 == 0 {
			for i := range demands {
				demands[i] = int(rng.ExpFloat64() * 250)
			}
			demands[rng.IntN(alive)] = 3000 // a hot plane
		}
		if s == 35 { // one plane's instance killed: its stream ends
			alive--
			require.NoError(t, fleet[alive].Stream.CloseSend())
		}
		total := 0
		grants := 0
		admitted := make([]int, alive)
		for i, p := range fleet[:alive] {
			admitted[i] = len(p.Serve(now, now.Add(interval), float64(demands[i])))
			total += admitted[i]
			requests += demands[i]
			grants += p.Size()
		}
		require.LessOrEqual(t, total, limit+grants, "interval %d: the limit and a tenth of each grant", s)
		if s%10 >= 3 && (s < 35 || s > 38) {
			fair := FairShares(limit, asInt64(demands[:alive]))
			asked, got := 0, 0
			for i := range fleet[:alive] {
				asked += demands[i]
				got += min(demands[i], int(fair[i]))
			}
			if asked >= limit {
				require.GreaterOrEqual(t, total, got*9/10, "interval %d: converged, the fleet admits its fair shares", s)
			}
			for i, d := range demands[:alive] {
				if int64(d) < fair[i] {
					require.GreaterOrEqual(t, admitted[i], d*9/10, "interval %d: plane %d asks %d, under its share %d", s, i, d, fair[i])
				}
			}
		}
		admittedAll += total
		now = now.Add(interval)
		for _, p := range fleet[:alive] {
			report(p, interval)
		}
	}
	// The service's calls per admitted request, against RLS's one call a
	// request on the same load: the issue asks for 100x fewer.
	perAdmitted, rlsPerAdmitted := float64(reports)/float64(admittedAll), float64(requests)/float64(admittedAll)
	t.Logf("calls per admitted request: RLQS %.4f, RLS %.2f (%.0fx fewer)", perAdmitted, rlsPerAdmitted, rlsPerAdmitted/perAdmitted)
	require.GreaterOrEqual(t, rlsPerAdmitted/perAdmitted, 100.0)
}

func asInt64(v []int) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}

// serve starts srv on a loopback port until t ends.
func serve(t *testing.T, srv *Server) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer()
	rlqsv3.RegisterRateLimitQuotaServiceServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}
