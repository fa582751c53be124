package promlimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/promlimit"
)

// Decisions observed from many goroutines are each counted once, under
// their own labels, and the series exported are those observed: a policy's
// series are resolved once and kept, not made ahead.
func TestConcurrentDecisionsAreCountedUnderTheirLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	o, err := promlimit.New(reg)
	require.NoError(t, err)
	events := []ratelimit.Event{
		{Name: "a", Decision: ratelimit.Decision{Allowed: true}, Latency: time.Microsecond},
		{Name: "a", Decision: ratelimit.Decision{Allowed: false}, Latency: time.Microsecond},
		{Name: "b", Decision: ratelimit.Decision{Allowed: true, Source: ratelimit.SourceFallback}, DryRun: true, Latency: time.Millisecond},
	}
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				o.Observe(context.Background(), events[(g+i)%len(events)])
			}
		}()
	}
	wg.Wait()
	counts := map[string]float64{}
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "ratelimit_decisions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + " "
			}
			counts[key] = m.GetCounter().GetValue()
		}
	}
	total := 0.0
	for _, key := range []string{
		"dry_run=false policy=a result=allowed source=store ",
		"dry_run=false policy=a result=denied source=store ",
		"dry_run=true policy=b result=allowed source=fallback ",
	} {
		require.InDelta(t, goroutines*each/len(events), counts[key], goroutines, "%s in %v", key, counts)
		total += counts[key]
	}
	require.Equal(t, float64(goroutines*each), total)
	series, err := testutil.GatherAndCount(reg, "ratelimit_decisions_total")
	require.NoError(t, err)
	require.Equal(t, 3, series, "the series observed, no others")
	hist, err := testutil.GatherAndCount(reg, "ratelimit_decision_duration_seconds")
	require.NoError(t, err)
	require.Equal(t, 2, hist, "a latency series per policy")
}
