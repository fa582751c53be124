// Package promlimit exports a Limiter's decisions as Prometheus metrics. It
// lives apart so that the core module's packages do not depend on the
// Prometheus client.
//
//	obs, err := promlimit.New(prometheus.DefaultRegisterer)
//	limiter, err := ratelimit.New(store, policy, ratelimit.WithName("per-user"), ratelimit.WithObserver(obs))
//
// Metrics, labelled by the Limiter's name (WithName) as "policy":
//
//	ratelimit_decisions_total{policy, result="allowed|denied|error", source="store|fail-open|...", dry_run="true|false"}
//	ratelimit_decision_duration_seconds{policy}   (a histogram of the store's latency)
//	ratelimit_permits_held{policy}                (an InFlight policy's permits this process holds)
//
// and, from a guard.Store built WithStateObserver(obs.BreakerStateChanged),
// labelled by the guard's name:
//
//	ratelimit_breaker_state{store}                  (0 closed, 1 half-open, 2 open)
//	ratelimit_breaker_transitions_total{store, to}
//
// and, for a memory store registered with RegisterMemoryStore:
//
//	ratelimit_memory_keys{store}
//	ratelimit_memory_active_evictions_total{store}  (keys evicted inside their window)
//	ratelimit_memory_refused_keys_total{store}      (new keys refused by a full store)
//
// Keys are deliberately not labels (one series per user would swamp
// Prometheus): to trace a denial to its key, log it from an Observer of your
// own, or chain one with this one.
package promlimit

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/guard"
)

// Observer is a ratelimit.Observer that updates the metrics.
type Observer struct {
	decisions   *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	permits     *prometheus.GaugeVec
	state       *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	series      seriesCache // decisions' and latency's, by policy
}

// New registers the metrics with reg and returns their Observer. One
// Observer serves any number of Limiters.
func New(reg prometheus.Registerer) (*Observer, error) {
	o := &Observer{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_decisions_total",
			Help: "Rate limit decisions, by policy, result (allowed, denied, error) and what made them (the store, or a failure mode).",
		}, []string{"policy", "result", "source", "dry_run"}),
		permits: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ratelimit_permits_held",
			Help: "Permits of an InFlight policy this process holds (acquired from the store, not yet released).",
		}, []string{"policy"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratelimit_decision_duration_seconds",
			Help:    "Time the store took to decide.",
			Buckets: []float64{.00001, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1},
		}, []string{"policy"}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ratelimit_breaker_state",
			Help: "State of a guarded store's circuit breaker: 0 closed, 1 half-open, 2 open.",
		}, []string{"store"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_breaker_transitions_total",
			Help: "Changes of a guarded store's circuit breaker, by the state entered.",
		}, []string{"store", "to"}),
	}
	for _, c := range []prometheus.Collector{o.decisions, o.latency, o.permits, o.state, o.transitions} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Observe implements ratelimit.Observer. A failure mode's decision counts as
// allowed or denied with its source; only an error the caller got counts as
// "error".
func (o *Observer) Observe(_ context.Context, e ratelimit.Event) {
	switch {
	case e.Op == ratelimit.OpRelease: // a permit given back: not a decision
		o.permits.WithLabelValues(e.Name).Dec()
		return
	case e.Op == ratelimit.OpAcquire && e.Decision.Allowed && e.Decision.Source == ratelimit.SourceStore:
		o.permits.WithLabelValues(e.Name).Inc()
	}
	result := resultAllowed
	switch {
	case e.Err != nil && e.Decision.Source == ratelimit.SourceStore:
		result = resultError
	case !e.Decision.Allowed:
		result = resultDenied
	}
	o.decision(e.Name, result, e.Decision.Source, e.DryRun, e.Latency.Seconds())
}

// PermitsHeld is the gauge of the permits policy's Limiter holds in this
// process (ratelimit_permits_held).
func (o *Observer) PermitsHeld(policy string) prometheus.Gauge {
	return o.permits.WithLabelValues(policy)
}

// BreakerState sets the state gauge of store's breaker, counting no
// transition: call it with the guard's State when the guard is made, so
// that the gauge exists (closed) before the first transition, as a
// dashboard or an alert on it expects.
func (o *Observer) BreakerState(store string, s guard.State) {
	o.state.WithLabelValues(store).Set(float64(s))
}

// BreakerStateChanged updates the breaker metrics; pass it to
// guard.WithStateObserver.
func (o *Observer) BreakerStateChanged(store string, _, to guard.State) {
	o.state.WithLabelValues(store).Set(float64(to))
	o.transitions.WithLabelValues(store, to.String()).Inc()
}

// RegisterMemoryStore registers the key bound's metrics of s with reg,
// labelled store=name. They are read from s when scraped.
func RegisterMemoryStore(reg prometheus.Registerer, name string, s *memory.Store) error {
	labels := prometheus.Labels{"store": name}
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ratelimit_memory_keys", ConstLabels: labels,
			Help: "Keys held by a memory store."}, func() float64 { return float64(s.Len()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ratelimit_memory_active_evictions_total", ConstLabels: labels,
			Help: "Keys a full memory store evicted while still inside their window (their history forgotten)."},
			func() float64 { return float64(s.ActiveEvictions()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ratelimit_memory_refused_keys_total", ConstLabels: labels,
			Help: "New keys a full memory store refused (WithWhenFull(RefuseNewKeys))."},
			func() float64 { return float64(s.Refused()) }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
