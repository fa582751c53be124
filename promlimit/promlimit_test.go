package promlimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/guard"
	"github.com/ratelimit-go/ratelimit/promlimit"
)

type brokenStore struct{ backend.Unimplemented }

func (brokenStore) Take(context.Context, backend.Request) (backend.Outcome, error) {
	return backend.Outcome{}, errors.New("server down")
}
func (brokenStore) Peek(context.Context, backend.Request) (backend.Outcome, error) {
	return backend.Outcome{}, errors.New("server down")
}
func (brokenStore) Reset(context.Context, string, string) error { return nil }

func TestCountsDecisionsByPolicyAndResult(t *testing.T) {
	reg := prometheus.NewRegistry()
	obs, err := promlimit.New(reg)
	require.NoError(t, err)
	s, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	l, err := ratelimit.New(s, ratelimit.PerMinute(2), ratelimit.WithName("per-user"), ratelimit.WithObserver(obs))
	require.NoError(t, err)
	for i := 0; i < 5; i++ {
		_, err := l.Allow(ctx, "alice")
		require.NoError(t, err)
	}
	broken, err := ratelimit.New(brokenStore{}, ratelimit.PerMinute(2), ratelimit.WithName("per-ip"), ratelimit.WithObserver(obs))
	require.NoError(t, err)
	_, err = broken.Allow(ctx, "10.0.0.1")
	require.Error(t, err)
	open, err := ratelimit.New(brokenStore{}, ratelimit.PerMinute(2), ratelimit.WithName("per-token"), ratelimit.WithObserver(obs), ratelimit.WithFailOpen())
	require.NoError(t, err)
	_, err = open.Allow(ctx, "t")
	require.NoError(t, err)

	want := `
# HELP ratelimit_decisions_total Rate limit decisions, by policy, result (allowed, denied, error) and what made them (the store, or a failure mode).
# TYPE ratelimit_decisions_total counter
ratelimit_decisions_total{dry_run="false",policy="per-ip",result="error",source="store"} 1
ratelimit_decisions_total{dry_run="false",policy="per-token",result="allowed",source="fail-open"} 1
ratelimit_decisions_total{dry_run="false",policy="per-user",result="allowed",source="store"} 2
ratelimit_decisions_total{dry_run="false",policy="per-user",result="denied",source="store"} 3
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "ratelimit_decisions_total"))
	require.Equal(t, 3, testutil.CollectAndCount(reg, "ratelimit_decision_duration_seconds"), "a latency histogram per policy")

	_, err = promlimit.New(reg)
	require.Error(t, err, "registering twice is refused, not silently ignored")
}

func TestExportsTheBreakersState(t *testing.T) {
	reg := prometheus.NewRegistry()
	obs, err := promlimit.New(reg)
	require.NoError(t, err)
	s, err := guard.New(brokenStore{}, guard.WithName("redis"), guard.WithFailures(2), guard.WithStateObserver(obs.BreakerStateChanged))
	require.NoError(t, err)
	obs.BreakerState("redis", s.State())
	closed := `
# HELP ratelimit_breaker_state State of a guarded store's circuit breaker: 0 closed, 1 half-open, 2 open.
# TYPE ratelimit_breaker_state gauge
ratelimit_breaker_state{store="redis"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(closed), "ratelimit_breaker_state", "ratelimit_breaker_transitions_total"),
		"the gauge from the start, no transition counted")
	l, err := ratelimit.New(s, ratelimit.PerMinute(2), ratelimit.WithName("per-user"), ratelimit.WithObserver(obs))
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err := l.Allow(context.Background(), "alice")
		require.ErrorIs(t, err, ratelimit.ErrStore)
	}
	want := `
# HELP ratelimit_breaker_state State of a guarded store's circuit breaker: 0 closed, 1 half-open, 2 open.
# TYPE ratelimit_breaker_state gauge
ratelimit_breaker_state{store="redis"} 2
# HELP ratelimit_breaker_transitions_total Changes of a guarded store's circuit breaker, by the state entered.
# TYPE ratelimit_breaker_transitions_total counter
ratelimit_breaker_transitions_total{store="redis",to="open"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "ratelimit_breaker_state", "ratelimit_breaker_transitions_total"))
}

func TestExportsTheMemoryStoresKeyBound(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := memory.New(memory.WithMaxKeys(1), memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	require.NoError(t, promlimit.RegisterMemoryStore(reg, "local", s))
	l, err := ratelimit.New(s, ratelimit.PerMinute(5))
	require.NoError(t, err)
	for _, k := range []string{"a", "b", "c"} {
		_, err := l.Allow(context.Background(), k)
		require.NoError(t, err)
	}
	want := `
# HELP ratelimit_memory_active_evictions_total Keys a full memory store evicted while still inside their window (their history forgotten).
# TYPE ratelimit_memory_active_evictions_total counter
ratelimit_memory_active_evictions_total{store="local"} 2
# HELP ratelimit_memory_keys Keys held by a memory store.
# TYPE ratelimit_memory_keys gauge
ratelimit_memory_keys{store="local"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "ratelimit_memory_keys", "ratelimit_memory_active_evictions_total"))
}

// The permits an InFlight policy's Limiter holds in this process: up with
// each permit acquired, down with each released; a denial holds none.
func TestCountsThePermitsHeld(t *testing.T) {
	reg := prometheus.NewRegistry()
	obs, err := promlimit.New(reg)
	require.NoError(t, err)
	s, err := memory.New()
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	l, err := ratelimit.New(s, ratelimit.Concurrency(2, time.Minute), ratelimit.WithName("jobs"), ratelimit.WithObserver(obs))
	require.NoError(t, err)
	held := func() float64 { return testutil.ToFloat64(obs.PermitsHeld("jobs")) }
	a, _, err := l.Acquire(ctx, "tenant")
	require.NoError(t, err)
	b, _, err := l.Acquire(ctx, "tenant")
	require.NoError(t, err)
	none, _, err := l.Acquire(ctx, "tenant")
	require.NoError(t, err)
	require.Nil(t, none)
	require.Equal(t, 2.0, held())
	require.NoError(t, a.Release(ctx))
	require.NoError(t, a.Release(ctx), "twice: counted once")
	require.Equal(t, 1.0, held())
	require.NoError(t, b.Release(ctx))
	require.Equal(t, 0.0, held())
}
