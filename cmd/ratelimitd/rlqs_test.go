package main

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// fleetRules is the fleet tests' one rule: 1,000 a second per tenant.
const fleetRules = `
domain: fleet
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1000}
`

// With -rlqs-ttl, ratelimitd serves Envoy's Rate Limit Quota Service on
// its gRPC listener: two planes reporting one bucket of a rule of 600 a
// minute, each asking for more than half: the first is granted the whole
// rule, the second nothing while the first may still enforce it, and once
// that has passed (its TTL and half again) each half (a token bucket of
// one token every 200ms);
// without the flag the service is not there.
func TestRLQSAssignsTheRuleSplitBetweenPlanes(t *testing.T) {
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "limits.yaml"), `
domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 600}
`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	report := &rlqsv3.RateLimitQuotaUsageReports{Domain: "quota", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"tenant": "acme"}}, TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: 10, NumRequestsDenied: 20,
	}}}

	const ttl = 3 * time.Second // a plane silent for two is dropped: a stall of 3s between two reports would fail this
	d := start(t, "-config", cfg, "-rlqs-ttl", ttl.String())
	client := rlqsv3.NewRateLimitQuotaServiceClient(d.conn)
	// rate is a token bucket's rate, in requests a minute, and its size;
	// 0, 0 for DENY_ALL.
	rate := func(s rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient) (perMinute, size int64) {
		if err := s.Send(report); err != nil {
			_, status := s.Recv() // the stream's end, as the server gave it
			t.Fatalf("a report: %v (the stream: %v); the service's log:\n%s", err, status, d.logs())
		}
		res, err := s.Recv()
		require.NoError(t, err, "an answer")
		require.Len(t, res.GetBucketAction(), 1, "an answer: %v", res)
		a := res.GetBucketAction()[0].GetQuotaAssignmentAction()
		require.Equal(t, ttl, a.GetAssignmentTimeToLive().AsDuration(), "the TTL: %v", a)
		tb := a.GetRateLimitStrategy().GetTokenBucket()
		if tb == nil {
			require.Equal(t, "DENY_ALL", a.GetRateLimitStrategy().GetBlanketRule().String(), "no token bucket: %v", a)
			return 0, 0
		}
		return int64(time.Minute / (tb.GetFillInterval().AsDuration() / time.Duration(tb.GetTokensPerFill().GetValue()))), int64(tb.GetMaxTokens())
	}
	var planes []rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	for range 2 {
		s, err := client.StreamRateLimitQuotas(ctx)
		require.NoError(t, err)
		planes = append(planes, s)
	}
	perMinute, size := rate(planes[0])
	require.Equal(t, []int64{600, 60}, []int64{perMinute, size}, "the first plane: the whole rule, a tenth of it as its bucket's size")
	perMinute, _ = rate(planes[1])
	require.Zero(t, perMinute, "the second: nothing while the first may hold it all")
	time.Sleep(ttl + ttl/2) // the first's grant has ended: it counts a TTL and half again
	for i, s := range planes {
		perMinute, size = rate(s)
		require.Equal(t, []int64{300, 30}, []int64{perMinute, size}, "plane %d: half the rule", i)
	}

	plain := start(t, "-config", cfg)
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(plain.conn).StreamRateLimitQuotas(ctx)
	require.NoError(t, err)
	// The service may end the stream before the report goes (it failed
	// CI so, beside a busy loop per CPU): Send then says io.EOF, and Recv
	// gives the stream's status either way.
	if err := s.Send(report); err != nil {
		require.ErrorIs(t, err, io.EOF)
	}
	_, err = s.Recv()
	require.Equal(t, codes.Unimplemented, status.Code(err))
}
