package rlqs

import (
	"context"
	"fmt"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
)

// One stream cannot make the service keep or match without bound: a
// report past 1,000 buckets, a stream past 1,000 distinct ones, or a
// bucket id of more than 16 entries ends the stream InvalidArgument, and
// the buckets of a stream within them are answered.
func TestAStreamsBucketsAreBounded(t *testing.T) {
	cfg, err := config.Parse("b.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n"))
	require.NoError(t, err)
	srv := NewServer(func() *config.Config { return cfg }, NewMemoryLedger(nil), time.Second)
	conn, err := grpc.NewClient(serve(t, srv), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	client := rlqsv3.NewRateLimitQuotaServiceClient(conn)
	usages := func(from, n int, entries int) []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
		var out []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
		for i := from; i < from+n; i++ {
			id := map[string]string{"k": fmt.Sprint(i)}
			for e := 1; e < entries; e++ {
				id[fmt.Sprint("e", e)] = "v"
			}
			out = append(out, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: id}})
		}
		return out
	}
	send := func(reports ...[]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) error {
		s, err := client.StreamRateLimitQuotas(context.Background())
		require.NoError(t, err)
		for _, r := range reports {
			require.NoError(t, s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "d", BucketQuotaUsages: r}))
			res, err := s.Recv()
			if err != nil {
				return err
			}
			require.Len(t, res.GetBucketAction(), len(r), "every bucket answered")
		}
		return s.CloseSend()
	}
	require.NoError(t, send(usages(0, 600, 1), usages(0, 600, 1), usages(600, 400, 1)), "1,000 buckets on a stream")
	require.Equal(t, codes.InvalidArgument, status.Code(send(usages(0, 1001, 1))), "1,001 in a report")
	require.Equal(t, codes.InvalidArgument, status.Code(send(usages(0, 600, 1), usages(600, 401, 1))), "1,001 on a stream")
	require.Equal(t, codes.InvalidArgument, status.Code(send(usages(0, 1, 17))), "a bucket id of 17 entries")
}
