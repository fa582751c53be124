package promlimit

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-go/ratelimit"
)

// The results of a decision, indexes of results.
const (
	resultAllowed = iota
	resultDenied
	resultError
)

// results are the values of the result label, by index.
var results = [...]string{resultAllowed: "allowed", resultDenied: "denied", resultError: "error"}

// numSources is the number of Sources a policy's series are kept for;
// another Source's decision is counted through the Vec itself.
const numSources = int(ratelimit.SourceFallback) + 1

// policySeries are one policy's decision counters and latency observer,
// each resolved from its Vec once, when first used: a Vec's
// WithLabelValues validates and hashes every label value on each call,
// which took 14% of ratelimitd's decision of three cached denials (a
// profile of its bench). A counter is made only once a decision needs it,
// so the series exported are the ones observed, as before.
type policySeries struct {
	latency   prometheus.Observer
	decisions [len(results)][numSources][2]atomic.Pointer[prometheus.Counter]
}

// seriesCache holds the policySeries of every policy observed.
type seriesCache struct {
	mu       sync.RWMutex
	policies map[string]*policySeries
}

// of returns policy's series, made on its first decision.
func (c *seriesCache) of(o *Observer, policy string) *policySeries {
	c.mu.RLock()
	ps := c.policies[policy]
	c.mu.RUnlock()
	if ps != nil {
		return ps
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ps = c.policies[policy]; ps == nil {
		if c.policies == nil {
			c.policies = map[string]*policySeries{}
		}
		ps = &policySeries{latency: o.latency.WithLabelValues(policy)}
		c.policies[policy] = ps
	}
	return ps
}

// decision counts a decision of policy: result indexes results.
func (o *Observer) decision(policy string, result int, source ratelimit.Source, dryRun bool, latency float64) {
	ps := o.series.of(o, policy)
	ps.latency.Observe(latency)
	if int(source) >= numSources {
		o.decisions.WithLabelValues(policy, results[result], source.String(), strconv.FormatBool(dryRun)).Inc()
		return
	}
	d := 0
	if dryRun {
		d = 1
	}
	slot := &ps.decisions[result][source][d]
	c := slot.Load()
	if c == nil {
		made := o.decisions.WithLabelValues(policy, results[result], source.String(), strconv.FormatBool(dryRun))
		c = &made
		slot.Store(c) // two racing first calls store the same child
	}
	(*c).Inc()
}
