package main

import (
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/service"
)

// A detailed rule has series for at most -detailed-max-values values; the
// rest are counted, under "other": every value once became a series kept
// for good (200,000 values, 333 MB RSS and rising).
func TestDetailedSeriesAreBoundedPerRule(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newDetailedMetrics(reg, 3)
	for i := 0; i < 1000; i++ {
		m.observe(service.Detail{Rule: "api.user", Descriptor: "api.user_" + strconv.Itoa(i)})
	}
	m.observe(service.Detail{Rule: "api.user", Descriptor: "api.user_1"})
	m.observe(service.Detail{Rule: "api.ip", Descriptor: "api.ip_1"})
	assert.Equal(t, 3+1+1, testutil.CollectAndCount(m.counter), "three values and other for one rule, one for the other rule")
	assert.Equal(t, 997.0, testutil.ToFloat64(m.counter.WithLabelValues("api.user", otherValues, "allowed")))
	assert.Equal(t, 2.0, testutil.ToFloat64(m.counter.WithLabelValues("api.user", "api.user_1", "allowed")), "a value with a series keeps it")
	require.Len(t, m.seen["api.user"], 3)
}
