package main

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/service"
)

// otherValues is the descriptor label of a rule's decisions past its
// bound of distinct values.
const otherValues = "other"

// detailedMetrics counts the decisions of detailed_metric rules per
// descriptor value, with at most max distinct values per rule: clients
// choose the values (addresses, header values), and every new one was a
// series kept for the process's life (200,000 values, 20.6 MB a scrape).
// The values past the bound are counted under "other".
type detailedMetrics struct {
	counter *prometheus.CounterVec
	max     int
	mu      sync.RWMutex
	seen    map[string]map[string]struct{} // rule → its values with a series
}

func newDetailedMetrics(reg prometheus.Registerer, max int) *detailedMetrics {
	m := &detailedMetrics{
		counter: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimitd_detailed_decisions_total",
			Help: "Decisions of the rules marked detailed_metric, per descriptor value; past -detailed-max-values values of a rule, under descriptor=\"other\".",
		}, []string{"rule", "descriptor", "result"}),
		max:  max,
		seen: map[string]map[string]struct{}{},
	}
	reg.MustRegister(m.counter)
	return m
}

// observe counts one decision.
func (m *detailedMetrics) observe(d service.Detail) {
	result := "allowed"
	switch {
	case d.Status.Shadowed:
		result = "shadow_over_limit"
	case d.Status.OverLimit:
		result = "over_limit"
	}
	m.counter.WithLabelValues(d.Rule, m.label(d.Rule, d.Descriptor), result).Inc()
}

// label is descriptor's label under rule: itself while the rule has fewer
// than max values, or already has it; otherValues after.
func (m *detailedMetrics) label(rule, descriptor string) string {
	m.mu.RLock()
	_, known := m.seen[rule][descriptor]
	m.mu.RUnlock()
	if known { // the common case, under a shared lock
		return descriptor
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	values := m.seen[rule]
	if values == nil {
		values = map[string]struct{}{}
		m.seen[rule] = values
	}
	if _, ok := values[descriptor]; ok {
		return descriptor
	}
	if len(values) >= m.max {
		return otherValues
	}
	values[descriptor] = struct{}{}
	return descriptor
}
