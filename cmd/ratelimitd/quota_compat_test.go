package main

import (
	"context"
	"path/filepath"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// pool is the descriptor service=name of envoyproxy/ratelimit's example
// routes, with a hits_addend when hits is not negative.
func pool(name string, hits int) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "service", Value: name}}}
	if hits >= 0 {
		d.HitsAddend = wrapperspb.UInt64(uint64(hits))
	}
	return d
}

// TestEnvoysQuotaScriptsDecideTheSame replays envoyproxy/ratelimit master's
// quota.sh, token-quota.sh and multiservice-tokenquota.sh against the
// binary on its example configuration (service_1 and service_2, quota
// pools of 1 and 2 a minute, each with metadata naming it), as its example
// Envoy sends them: the check on the request path, the report of 1 on the
// response path, and the route chosen from the dynamic metadata.
func TestEnvoysQuotaScriptsDecideTheSame(t *testing.T) {
	ctx := context.Background()
	ask := func(d *daemon, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		res, err := d.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: ds})
		require.NoError(t, err)
		return res
	}
	ok := func(res *rlsv3.RateLimitResponse) bool { return res.OverallCode == rlsv3.RateLimitResponse_OK }
	example := filepath.Join(upstream, "examples-config")

	t.Run("quota.sh", func(t *testing.T) {
		d := start(t, "-config", example)
		var got []bool
		for range 3 {
			got = append(got, ok(ask(d, pool("service_1", -1), pool("service_2", -1))))
		}
		assert.Equal(t, []bool{true, true, false}, got, "debited from every pool; over once both are spent")
	})

	t.Run("token-quota.sh", func(t *testing.T) {
		d := start(t, "-config", example)
		var got []bool
		for range 4 {
			passed := ok(ask(d, pool("service_2", 0)))
			got = append(got, passed)
			if passed {
				ask(d, pool("service_2", 1)) // the response path's report
			}
		}
		assert.Equal(t, []bool{true, true, true, false}, got, "a check passes until the reports pass the limit")
	})

	t.Run("multiservice-tokenquota.sh", func(t *testing.T) {
		d := start(t, "-config", example, "-dynamic-metadata")
		var served []string
		for range 6 {
			res := ask(d, pool("service_1", 0), pool("service_2", 0))
			if !ok(res) {
				served = append(served, "429")
				continue
			}
			name := res.GetDynamicMetadata().GetFields()["metadata"].GetStructValue().GetFields()["service_with_quota"].GetStructValue().GetFields()["name"].GetStringValue()
			served = append(served, name)
			ask(d, pool(name, 1))
		}
		assert.Equal(t, []string{"service_1", "service_1", "service_2", "service_2", "service_2", "429"}, served)
	})
}
