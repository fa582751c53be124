package service

import (
	"context"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const withMetadata = `domain: api
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata:
      service_with_quota: {name: service_1, tier: a}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata:
      service_with_quota: {name: service_2, zone: b}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
`

func entries(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// By default an answer carries no header, as envoyproxy/ratelimit's; with
// its LIMIT_RESPONSE_HEADERS_ENABLED, its three, of the descriptor closest
// to its limit, the reset counted to the end of the unit's window.
func TestHeadersOnlyAsAskedAndUpstreamsAsItComputesThem(t *testing.T) {
	svc, clk := newService(t, withMetadata)
	clk.Add(15 * 60e9) // 12:15: 45 minutes to the hour's end
	in := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{entries("user", "u"), entries("nobody", "x")}}
	out, err := NewRLS(svc).ShouldRateLimit(context.Background(), in)
	require.NoError(t, err)
	assert.Empty(t, out.ResponseHeadersToAdd)

	out, err = NewRLS(svc, WithUpstreamHeaders("X-Limit", "X-Remaining", "X-Reset")).ShouldRateLimit(context.Background(), in)
	require.NoError(t, err)
	got := map[string]string{}
	for _, h := range out.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	assert.Equal(t, map[string]string{"X-Limit": "10", "X-Remaining": "8", "X-Reset": "2700"}, got)
}

// RESPONSE_DYNAMIC_METADATA: the request echoed, and the metadata of the
// rules that did not deny, merged.
func TestDynamicMetadataAsUpstreamGivesIt(t *testing.T) {
	svc, _ := newService(t, withMetadata)
	rls := NewRLS(svc, WithDynamicMetadata())
	d2 := entries("service", "service_2")
	d2.HitsAddend = wrapperspb.UInt64(1)
	in := &rlsv3.RateLimitRequest{Domain: "api", HitsAddend: 1, Descriptors: []*rlv3.RateLimitDescriptor{entries("service", "service_1"), d2}}
	out, err := rls.ShouldRateLimit(context.Background(), in)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{
		"domain": "api",
		"descriptors": []any{
			map[string]any{"entries": []any{"service=service_1"}},
			map[string]any{"entries": []any{"service=service_2"}, "hitsAddend": 1.0},
		},
		"hitsAddend": 1.0,
		"metadata":   map[string]any{"service_with_quota": map[string]any{"name": "service_1", "tier": "a", "zone": "b"}},
	}, out.DynamicMetadata.AsMap(), "both passed: merged in order, the first's name stays")

	out, err = rls.ShouldRateLimit(context.Background(), in)
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, out.OverallCode, "service_2's pool is open")
	assert.Equal(t, map[string]any{"service_with_quota": map[string]any{"name": "service_2", "zone": "b"}},
		out.DynamicMetadata.AsMap()["metadata"], "service_1 is over: only service_2's")

	cfg := svc.Config()
	r, _ := cfg.Match("api", desc("service", "service_1").Entries)
	assert.Len(t, r.Metadata.GetFields()["service_with_quota"].GetStructValue().GetFields(), 2, "the rule's metadata is unchanged")
}
