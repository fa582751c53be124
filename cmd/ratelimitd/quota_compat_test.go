package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

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
	ok := func(res *rlsv3.RateLimitResponse) bool { return res.OverallCode == rlsv3.RateLimitResponse_OK }
	example := filepath.Join(upstream, "examples-config")
	// Each script runs on a fresh service; a minute that turns during it
	// (its pools are per minute) is seen in the resets, and it runs again.
	script := func(t *testing.T, args []string, run func(ask func(...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitResponse)) {
		for attempt := 0; ; attempt++ {
			require.Less(t, attempt, 3, "a minute turned during every attempt")
			d := start(t, args...)
			last, turned := time.Duration(0), false
			run(func(ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
				res, err := d.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: ds})
				require.NoError(t, err)
				for _, st := range res.GetStatuses() {
					if r := st.GetDurationUntilReset().AsDuration(); st.GetDurationUntilReset() != nil {
						turned = turned || last > 0 && r > last
						last = r
					}
				}
				return res
			})
			if !turned {
				return
			}
		}
	}

	t.Run("quota.sh", func(t *testing.T) {
		var got []bool
		script(t, []string{"-config", example}, func(ask func(...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitResponse) {
			got = got[:0]
			for range 3 {
				got = append(got, ok(ask(pool("service_1", -1), pool("service_2", -1))))
			}
		})
		assert.Equal(t, []bool{true, true, false}, got, "debited from every pool; over once both are spent")
	})

	t.Run("token-quota.sh", func(t *testing.T) {
		var got []bool
		script(t, []string{"-config", example}, func(ask func(...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitResponse) {
			got = got[:0]
			for range 4 {
				passed := ok(ask(pool("service_2", 0)))
				got = append(got, passed)
				if passed {
					ask(pool("service_2", 1)) // the response path's report
				}
			}
		})
		assert.Equal(t, []bool{true, true, true, false}, got, "a check passes until the reports pass the limit")
	})

	t.Run("multiservice-tokenquota.sh", func(t *testing.T) {
		var served []string
		script(t, []string{"-config", example, "-dynamic-metadata"}, func(ask func(...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitResponse) {
			served = served[:0]
			for range 6 {
				res := ask(pool("service_1", 0), pool("service_2", 0))
				if !ok(res) {
					served = append(served, "429")
					continue
				}
				name := res.GetDynamicMetadata().GetFields()["metadata"].GetStructValue().GetFields()["service_with_quota"].GetStructValue().GetFields()["name"].GetStringValue()
				served = append(served, name)
				ask(pool(name, 1))
			}
		})
		assert.Equal(t, []string{"service_1", "service_1", "service_2", "service_2", "service_2", "429"}, served)
	})
}
