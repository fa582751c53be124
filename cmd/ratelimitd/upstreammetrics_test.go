package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/service"
)

// envoyproxy/ratelimit's counting of its counters (base_limiter.go): 12
// hits of one on a limit of 10 at a near-limit ratio of 0.8 are 10 within,
// 2 near (the 9th and 10th), 2 over; a hit of 5 from 8 is 3 over and 2
// near; a shadow rule's hits past its limit count over and shadow.
func TestUpstreamsCountersCountAsItCounts(t *testing.T) {
	m := newUpstreamMetrics(prometheus.NewRegistry(), 0.8)
	rule := &config.Rule{FullKey: "api.user.path_x", RequestsPerUnit: 10}
	for i := 1; i <= 12; i++ {
		st := service.Status{Rule: rule, Hits: 1, Counted: i <= 10, OverLimit: i > 10, Decision: ratelimit.Decision{Limit: 10, Count: min(i, 10)}}
		m.observe(service.Detail{Rule: rule.FullKey, Status: st})
	}
	c := m.counters(rule.FullKey)
	assert.Equal(t, []float64{12, 10, 2, 2, 0}, []float64{testutil.ToFloat64(c.total), testutil.ToFloat64(c.within),
		testutil.ToFloat64(c.near), testutil.ToFloat64(c.over), testutil.ToFloat64(c.shadow)})
	assert.Equal(t, 12.0, testutil.ToFloat64(m.total.WithLabelValues("api", "user", "path_x")), "domain, then two levels")

	other := &config.Rule{FullKey: "api.ip", RequestsPerUnit: 10, Shadow: true}
	m.observe(service.Detail{Rule: other.FullKey, Status: service.Status{Rule: other, Hits: 5, Shadowed: true, Decision: ratelimit.Decision{Limit: 10, Count: 8}}})
	c = m.counters(other.FullKey)
	assert.Equal(t, []float64{5, 0, 2, 3, 3}, []float64{testutil.ToFloat64(c.total), testutil.ToFloat64(c.within),
		testutil.ToFloat64(c.near), testutil.ToFloat64(c.over), testutil.ToFloat64(c.shadow)})
	assert.Equal(t, 5.0, testutil.ToFloat64(m.total.WithLabelValues("api", "ip", "")))

	// A guard's local share denies under a limit below the rule's: the
	// counters follow the decision's limit and never go back.
	m.observe(service.Detail{Rule: other.FullKey, Status: service.Status{Rule: other, Hits: 1, OverLimit: true, Decision: ratelimit.Decision{Limit: 2, Count: 2}}})
	assert.Equal(t, 4.0, testutil.ToFloat64(c.over))
	m.observe(service.Detail{Rule: other.FullKey, Status: service.Status{Rule: other, Hits: 1, Counted: true, Decision: ratelimit.Decision{Limit: 10, Count: 12, Allowed: true}}})
	assert.Equal(t, 1.0, testutil.ToFloat64(c.within), "a count past the limit, admitted")
}
