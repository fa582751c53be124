package main

import (
	"context"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The service reads Envoy's requests with its own codec (rlswire) and
// proto's for any it does not take: a request carrying a field this
// version does not know (a newer Envoy's) is decided as the same request
// without it, answer for answer.
func TestARequestWithAnUnknownFieldIsDecidedAsWithout(t *testing.T) {
	d := start(t, "-config", "../../examples/ratelimitd.yaml")
	ask := func(user string, unknown bool) *rlsv3.RateLimitResponse {
		in := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "key", Value: user}}},
		}}
		if unknown {
			in.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7))
			in.Descriptors[0].ProtoReflect().SetUnknown(protowire.AppendString(protowire.AppendTag(nil, 42, protowire.BytesType), "x"))
		}
		res, err := d.client.ShouldRateLimit(context.Background(), in)
		require.NoError(t, err)
		return res
	}
	overs := 0
	for range 12 { // past the examples' limit for a key: 10 a minute, a sliding log
		plain, odd := ask("plain", false), ask("odd", true)
		plain.Statuses[0].DurationUntilReset, odd.Statuses[0].DurationUntilReset = nil, nil // the clock's
		require.True(t, proto.Equal(plain, odd), "%v, and with an unknown field %v", plain, odd)
		if odd.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			overs++
		}
	}
	require.Equal(t, 2, overs)
}
