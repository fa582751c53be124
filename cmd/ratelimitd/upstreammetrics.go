package main

import (
	"context"
	"math"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/service"
)

// upstreamMetrics are envoyproxy/ratelimit's per-rule counters under the
// names its Prometheus mapping gives them (its statsd exporter's default
// mapper: ratelimit_service_rate_limit_total_hits{domain,key1,key2} and
// the others), beside ratelimitd's own, so that dashboards and alerts
// written for it carry over. Counted as it counts them, in hits (a
// request's cost): total_hits every one; over_limit the hits past the
// limit; near_limit those between the near-limit ratio and the limit;
// within_limit those of an admission; shadow_mode those a shadow rule let
// through past its limit (apart from over_limit's). key1 and key2 are the
// rule's first two levels below the domain ("" when it has one).
type upstreamMetrics struct {
	total, over, near, within, shadow *prometheus.CounterVec
	ratio                             float64
	rules                             sync.Map // a rule's full key → *ruleCounters
}

type ruleCounters struct{ total, over, near, within, shadow prometheus.Counter }

func newUpstreamMetrics(reg prometheus.Registerer, nearRatio float64) *upstreamMetrics {
	vec := func(what, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_rate_limit_" + what,
			Help: help + " (envoyproxy/ratelimit's name and counting).",
		}, []string{"domain", "key1", "key2"})
	}
	m := &upstreamMetrics{
		total:  vec("total_hits", "Hits decided under a rule"),
		over:   vec("over_limit", "Hits past a rule's limit"),
		near:   vec("near_limit", "Hits between a rule's near-limit ratio and its limit"),
		within: vec("within_limit", "Hits a rule admitted"),
		shadow: vec("shadow_mode", "Hits past a shadow rule's limit, let through"),
		ratio:  nearRatio,
	}
	reg.MustRegister(m.total, m.over, m.near, m.within, m.shadow)
	return m
}

// counters are the rule's series, made once.
func (m *upstreamMetrics) counters(fullKey string) *ruleCounters {
	if c, ok := m.rules.Load(fullKey); ok {
		return c.(*ruleCounters)
	}
	parts := strings.SplitN(fullKey, ".", 4)
	labels := []string{parts[0], "", ""}
	copy(labels[1:], parts[1:min(len(parts), 3)])
	c := &ruleCounters{m.total.WithLabelValues(labels...), m.over.WithLabelValues(labels...),
		m.near.WithLabelValues(labels...), m.within.WithLabelValues(labels...), m.shadow.WithLabelValues(labels...)}
	actual, _ := m.rules.LoadOrStore(fullKey, c)
	return actual.(*ruleCounters)
}

// observe counts one decision, against the limit it was decided under (a
// guard's local share while the store is down). Each part is clamped at 0:
// a counter never goes back, and a decision from an odd state (a count past
// its limit that is admitted after a policy change) must not panic.
func (m *upstreamMetrics) observe(d service.Detail) {
	st := d.Status
	hits := float64(st.Hits)
	limit := float64(st.Decision.Limit)
	after := float64(st.Decision.Count) // the count with this request's hits
	if !st.Counted {
		after += hits
	}
	before := after - hits
	near := math.Floor(limit * m.ratio)
	add := func(c prometheus.Counter, v float64) { c.Add(max(0, v)) }
	c := m.counters(d.Rule)
	add(c.total, hits)
	switch {
	case st.OverLimit || st.Shadowed:
		if before >= limit {
			add(c.over, hits)
		} else {
			add(c.over, after-limit)
			add(c.near, limit-max(near, before))
		}
		if st.Shadowed {
			add(c.shadow, min(hits, after-limit))
		}
	default:
		add(c.within, hits)
		if after > near {
			add(c.near, min(hits, after-near))
		}
	}
}

// dryRun marks the events of a rule that never denies (shadow) as dry
// runs: ratelimit_decisions_total counts its denials under dry_run="true",
// apart from those that denied a caller.
type dryRun struct{ ratelimit.Observer }

func (o dryRun) Observe(ctx context.Context, e ratelimit.Event) {
	e.DryRun = true
	o.Observer.Observe(ctx, e)
}
