package service

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
	"github.com/ratelimit-go/ratelimit/internal/counted"
)

// meeting holds each Charge until want are in flight together (or a
// while has passed), and keeps the most it saw in flight.
type meeting struct {
	backend.Store
	want     int
	mu       sync.Mutex
	inFlight int
	most     int
	met      chan struct{}
	once     sync.Once
}

func (m *meeting) Charge(ctx context.Context, r backend.Request) (backend.Outcome, error) {
	m.mu.Lock()
	m.inFlight++
	m.most = max(m.most, m.inFlight)
	if m.inFlight == m.want {
		m.once.Do(func() { close(m.met) })
	}
	m.mu.Unlock()
	select {
	case <-m.met:
	case <-time.After(10 * time.Second): // one after another: they never meet
	}
	m.mu.Lock()
	m.inFlight--
	m.mu.Unlock()
	return m.Store.Charge(ctx, r)
}

// counting holds three limits a key may be told apart by, and one of a
// single request a minute.
const counting = `domain: c
descriptors:
  - key: k1
    rate_limit: {unit: minute, requests_per_unit: 11}
  - key: k2
    rate_limit: {unit: minute, requests_per_unit: 12}
  - key: k3
    rate_limit: {unit: minute, requests_per_unit: 13}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
`

func newCounting(t *testing.T, store backend.Store) *Service {
	t.Helper()
	cfg, err := config.Parse("count.yaml", []byte(counting))
	require.NoError(t, err)
	clk := newClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	svc, err := New(store, cfg, Options{CountOverLimit: true, Limiter: []ratelimit.Option{ratelimit.WithCallerClock(clk.Now)}})
	require.NoError(t, err)
	return svc
}

// As master counts, a request's descriptors of distinct keys at one cost
// are charged in one call of the store (backend.Store's ChargeAll: one
// script on a server), not one after another: three descriptors were
// three round trips, 0.75x envoyproxy/ratelimit's rate, then three in
// flight at once. Each status is still its own descriptor's.
func TestChargesOfDistinctKeysAreOneCall(t *testing.T) {
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	store := counted.New(m)
	svc := newCounting(t, store)
	r := Request{Domain: "c", Descriptors: []Descriptor{desc("k1", "a"), desc("k2", "b"), desc("k3", "c")}}
	for round := 1; round <= 2; round++ {
		res, err := svc.Decide(context.Background(), r)
		require.NoError(t, err)
		for i, st := range res.Statuses {
			assert.Equal(t, 11+i, st.Decision.Limit, "descriptor %d's own limit", i)
			assert.Equal(t, round, st.Decision.Count, "descriptor %d charged once a request", i)
		}
	}
	assert.EqualValues(t, 2, store.ChargeAlls.Load(), "one call a request")
	assert.Zero(t, store.Charges.Load())
}

// Descriptors of distinct keys at costs of their own (hits_addend each)
// are charged at once (on a pipelining client, one round trip), not one
// after another.
func TestChargesOfOwnCostsAreInFlightTogether(t *testing.T) {
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	store := &meeting{Store: m, want: 3, met: make(chan struct{})}
	svc := newCounting(t, store)
	r := Request{Domain: "c", Descriptors: []Descriptor{desc("k1", "a"), desc("k2", "b"), desc("k3", "c")}}
	for i := range r.Descriptors {
		cost := uint64(i + 1)
		r.Descriptors[i].Cost = &cost
	}
	res, err := svc.Decide(context.Background(), r)
	require.NoError(t, err)
	assert.Equal(t, 3, store.most, "charges in flight together")
	for i, st := range res.Statuses {
		assert.Equal(t, 11+i, st.Decision.Limit, "descriptor %d's own limit", i)
		assert.Equal(t, i+1, st.Decision.Count, "descriptor %d charged its cost once", i)
	}
}

// A key a request names twice is charged in order, as upstream's pipeline
// does: the first of two at a limit of one is within it, the second over.
func TestAKeyNamedTwiceIsChargedInOrder(t *testing.T) {
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	var calls atomic.Int64
	svc := newCounting(t, countingCharges{Store: m, calls: &calls})
	for i := range 20 {
		v := string(rune('a' + i))
		res, err := svc.Decide(context.Background(), Request{Domain: "c", Descriptors: []Descriptor{desc("user", v), desc("k1", v), desc("user", v)}})
		require.NoError(t, err)
		assert.False(t, res.Statuses[0].OverLimit, "the first charge of %q", v)
		assert.True(t, res.Statuses[2].OverLimit, "the second charge of %q", v)
	}
	assert.Equal(t, int64(60), calls.Load())
}

type countingCharges struct {
	backend.Store
	calls *atomic.Int64
}

func (c countingCharges) Charge(ctx context.Context, r backend.Request) (backend.Outcome, error) {
	c.calls.Add(1)
	return c.Store.Charge(ctx, r)
}
