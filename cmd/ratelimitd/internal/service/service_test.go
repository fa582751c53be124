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
	"github.com/ratelimit-go/ratelimit/nearcache"
)

const rules = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: site
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: plan
    value: gold
    rate_limit: {unit: minute, requests_per_unit: 5, name: gold, replaces: [{name: basic}]}
  - key: plan
    rate_limit: {unit: minute, requests_per_unit: 1, name: basic}
  - key: beta
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: internal
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: files
    value: shared/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: log
    rate_limit: {window: 10s, requests_per_unit: 4, algorithm: sliding}
`

// clock is a test's time, moved by hand.
type clock struct{ now atomic.Int64 }

func (c *clock) Now() time.Time      { return time.Unix(0, c.now.Load()) }
func (c *clock) Add(d time.Duration) { c.now.Add(int64(d)) }
func newClock(at time.Time) *clock   { c := &clock{}; c.now.Store(at.UnixNano()); return c }
func one(kv ...string) []Descriptor  { return []Descriptor{desc(kv...)} }
func req(ds ...Descriptor) Request   { return Request{Domain: "api", Descriptors: ds} }
func verdicts(r Result) (over bool, per []bool) {
	for _, s := range r.Statuses {
		per = append(per, s.OverLimit)
	}
	return r.OverLimit, per
}

func desc(kv ...string) Descriptor {
	var d Descriptor
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, config.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// newService is a Service on a fresh memory store under rules, deciding at
// the returned clock (a minute's start, so fixed windows are whole).
func newService(t *testing.T, yaml string, store ...backend.Store) (*Service, *clock) {
	t.Helper()
	cfg, err := config.Parse("rules.yaml", []byte(yaml))
	require.NoError(t, err)
	var s backend.Store
	if len(store) > 0 {
		s = store[0]
	} else {
		m, err := memory.New()
		require.NoError(t, err)
		t.Cleanup(func() { m.Close() })
		s = m
	}
	clk := newClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	svc, err := New(s, cfg, Options{Limiter: []ratelimit.Option{ratelimit.WithCallerClock(clk.Now)}})
	require.NoError(t, err)
	return svc, clk
}

func decide(t *testing.T, svc *Service, r Request) Result {
	t.Helper()
	res, err := svc.Decide(context.Background(), r)
	require.NoError(t, err)
	return res
}

func TestALimitAdmitsItsQuotaThenDenies(t *testing.T) {
	svc, clk := newService(t, rules)
	clk.Add(20 * time.Second)
	for i := 1; i <= 3; i++ {
		res := decide(t, svc, req(one("user", "alice")...))
		require.False(t, res.OverLimit, "request %d", i)
		st := res.Statuses[0]
		assert.Equal(t, 3-i, st.Decision.Remaining)
		assert.Equal(t, 40*time.Second, st.Decision.ResetAt.Sub(st.Decision.At), "the minute's window ends at :00")
	}
	res := decide(t, svc, req(one("user", "alice")...))
	assert.True(t, res.OverLimit)
	assert.True(t, res.Statuses[0].OverLimit)
	assert.Equal(t, 40*time.Second, res.Statuses[0].Decision.RetryAfter)
	assert.False(t, decide(t, svc, req(one("user", "bob")...)).OverLimit, "another value, another counter")
	clk.Add(40 * time.Second)
	assert.False(t, decide(t, svc, req(one("user", "alice")...)).OverLimit, "the next window")
}

// envoyproxy/ratelimit counts a request one descriptor denies against every
// other (its issue 1060): here a denial consumes nothing.
func TestADenialConsumesNoQuotaFromTheOtherDescriptors(t *testing.T) {
	svc, _ := newService(t, rules)
	both := req(desc("site", "s1"), desc("user", "alice"))
	for i := 0; i < 3; i++ {
		require.False(t, decide(t, svc, both).OverLimit)
	}
	for i := 0; i < 5; i++ {
		res := decide(t, svc, both)
		over, per := verdicts(res)
		require.True(t, over)
		assert.Equal(t, []bool{false, true}, per, "the user's limit denies, the site's does not")
	}
	res := decide(t, svc, req(one("site", "s1")...))
	assert.Equal(t, 10-3-1, res.Statuses[0].Decision.Remaining, "the site counted the 3 admitted requests only")
}

func TestAReplacedRuleIsNotEvaluatedAndKeepsItsCounter(t *testing.T) {
	svc, _ := newService(t, rules)
	both := req(desc("plan", "gold"), desc("plan", "silver"))
	for i := 0; i < 5; i++ {
		res := decide(t, svc, both)
		require.False(t, res.OverLimit, "request %d: basic (1/min) is replaced by gold (5/min)", i)
		assert.Nil(t, res.Statuses[1].Rule, "the replaced descriptor is not limited")
	}
	assert.True(t, decide(t, svc, both).OverLimit, "gold's 5 are spent")
	res := decide(t, svc, req(one("plan", "silver")...))
	assert.False(t, res.OverLimit, "basic alone: its counter was never touched")
	assert.Equal(t, 0, res.Statuses[0].Decision.Remaining)
}

func TestAShadowRuleCountsAndAnswersOK(t *testing.T) {
	svc, _ := newService(t, rules)
	for i := 1; i <= 4; i++ {
		res := decide(t, svc, req(one("beta", "x")...))
		require.False(t, res.OverLimit)
		st := res.Statuses[0]
		assert.False(t, st.OverLimit)
		assert.Equal(t, i > 2, st.Shadowed, "request %d", i)
		assert.Equal(t, min(i, 2), st.Decision.Count, "counted up to the limit")
	}
	assert.Empty(t, Headers(decide(t, svc, req(one("beta", "x")...))), "clients never hear of a shadow limit")
}

func TestUnlimitedUnmatchedAndZeroRules(t *testing.T) {
	svc, _ := newService(t, rules)
	res := decide(t, svc, req(desc("internal", "x"), desc("nobody", "x")))
	assert.False(t, res.OverLimit)
	assert.True(t, res.Statuses[0].Rule.Unlimited)
	assert.False(t, res.Statuses[0].Asked())
	assert.Nil(t, res.Statuses[1].Rule)

	res = decide(t, svc, req(desc("banned", "x"), desc("user", "carol")))
	over, per := verdicts(res)
	assert.True(t, over)
	assert.Equal(t, []bool{true, false}, per)
	assert.Equal(t, 3, res.Statuses[1].Decision.Remaining, "peeked: the denial recorded nothing")
	assert.Equal(t, 3-1, decide(t, svc, req(one("user", "carol")...)).Statuses[0].Decision.Remaining)
}

func TestShareThresholdMakesMatchesShareOneCounter(t *testing.T) {
	svc, _ := newService(t, rules)
	assert.False(t, decide(t, svc, req(one("files", "shared/a")...)).OverLimit)
	assert.False(t, decide(t, svc, req(one("files", "shared/b")...)).OverLimit)
	assert.True(t, decide(t, svc, req(one("files", "shared/c")...)).OverLimit, "three files, one counter of 2")
}

func TestCostsCountAndACostOverTheLimitIsDenied(t *testing.T) {
	svc, _ := newService(t, rules)
	r := req(one("user", "dave")...)
	r.Cost = 2
	assert.Equal(t, 1, decide(t, svc, r).Statuses[0].Decision.Remaining)
	r.Descriptors[0].Cost = costOf(1) // the descriptor's own wins
	assert.Equal(t, 0, decide(t, svc, r).Statuses[0].Decision.Remaining)

	r = req(one("user", "erin")...)
	r.Cost = 4
	res := decide(t, svc, r)
	assert.True(t, res.OverLimit, "4 never fits in 3")
	assert.Equal(t, 3, res.Statuses[0].Decision.Remaining, "and records nothing")
}

func TestBadRequestsRecordNothing(t *testing.T) {
	svc, _ := newService(t, rules)
	ctx := context.Background()
	for name, r := range map[string]Request{
		"no domain":         {Descriptors: one("user", "x")},
		"no descriptors":    {Domain: "api"},
		"an empty one":      req(Descriptor{}),
		"an empty key":      req(desc("", "x")),
		"a cost too large":  {Domain: "api", Descriptors: one("user", "x"), Cost: 1 << 40},
		"an override unit":  req(Descriptor{Entries: one("user", "x")[0].Entries, Override: &Override{RequestsPerUnit: 1, Unit: 99}}),
		"a descriptor cost": req(Descriptor{Entries: one("user", "x")[0].Entries, Cost: costOf(1 << 40)}),
	} {
		_, err := svc.Decide(ctx, r)
		assert.ErrorIs(t, err, ErrBadRequest, name)
	}
	svc.strict = true
	_, err := svc.Decide(ctx, Request{Domain: "nope", Descriptors: one("user", "x")})
	assert.ErrorIs(t, err, ErrUnknownDomain, "StrictDomains")
	assert.Equal(t, 2, decide(t, svc, req(one("user", "x")...)).Statuses[0].Decision.Remaining)
}

func TestAnOverrideIsARequestsOwnLimit(t *testing.T) {
	svc, _ := newService(t, rules)
	d := Descriptor{Entries: one("user", "frank")[0].Entries, Override: &Override{RequestsPerUnit: 1, Unit: config.Hour}}
	res := decide(t, svc, req(d))
	require.False(t, res.OverLimit)
	assert.Equal(t, uint32(1), res.Statuses[0].Rule.RequestsPerUnit)
	assert.True(t, decide(t, svc, req(d)).OverLimit)
	assert.False(t, decide(t, svc, req(one("user", "frank")...)).OverLimit, "the configured rule keeps its own counter")
}

func TestAReloadAppliesToTheNextRequestAndKeepsCounters(t *testing.T) {
	svc, _ := newService(t, rules)
	for i := 0; i < 3; i++ {
		decide(t, svc, req(one("user", "gina")...))
	}
	require.True(t, decide(t, svc, req(one("user", "gina")...)).OverLimit)
	cfg, err := config.Parse("new.yaml", []byte("domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 4}\n"))
	require.NoError(t, err)
	require.NoError(t, svc.SetConfig(cfg))
	res := decide(t, svc, req(one("user", "gina")...))
	assert.False(t, res.OverLimit, "4 per minute now")
	assert.Equal(t, 4, res.Statuses[0].Decision.Count, "the 3 counted before the reload still count")
	assert.True(t, decide(t, svc, req(one("user", "gina")...)).OverLimit)
}

// blocking holds every Take until released: a request in flight.
type blocking struct {
	backend.Store
	entered chan struct{}
	release chan struct{}
}

func (b *blocking) Take(ctx context.Context, r backend.Request) (backend.Outcome, error) {
	b.entered <- struct{}{}
	<-b.release
	return b.Store.Take(ctx, r)
}

func TestARequestInFlightFinishesUnderItsConfig(t *testing.T) {
	m, err := memory.New()
	require.NoError(t, err)
	defer m.Close()
	b := &blocking{Store: m, entered: make(chan struct{}, 1), release: make(chan struct{})}
	svc, _ := newService(t, rules, b)
	done := make(chan Result)
	go func() { res, _ := svc.Decide(context.Background(), req(one("user", "hal")...)); done <- res }()
	<-b.entered
	cfg, err := config.Parse("new.yaml", []byte("domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unlimited: true}\n"))
	require.NoError(t, err)
	require.NoError(t, svc.SetConfig(cfg))
	close(b.release)
	res := <-done
	require.NotNil(t, res.Statuses[0].Rule)
	assert.False(t, res.Statuses[0].Rule.Unlimited, "decided under the configuration it started with")
	assert.Equal(t, 2, res.Statuses[0].Decision.Remaining)
	assert.True(t, decide(t, svc, req(one("user", "hal")...)).Statuses[0].Rule.Unlimited, "the next request is under the new one")
}

func TestConcurrentRequestsNeverOverAdmit(t *testing.T) {
	for _, yaml := range []string{rules} {
		svc, _ := newService(t, yaml)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 64; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					res, err := svc.Decide(context.Background(), req(desc("site", "s"), desc("log", "k")))
					if err == nil && !res.OverLimit {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		assert.Equal(t, int64(4), admitted.Load(), "the sliding log's 4 per 10 s, under the site's 10")
		assert.Equal(t, 10-4-1, decide(t, svc, req(one("site", "s")...)).Statuses[0].Decision.Remaining)
	}
}

func TestHeadersAreTheIETFFieldsOfTheEnforcedLimits(t *testing.T) {
	svc, clk := newService(t, rules)
	clk.Add(30 * time.Second)
	res := decide(t, svc, req(desc("user", "ivan"), desc("beta", "b"), desc("internal", "i")))
	assert.Equal(t, []Header{
		{"RateLimit-Policy", `"api.user";q=3;w=60`},
		{"RateLimit", `"api.user";r=2;t=30`},
	}, Headers(res))
	decide(t, svc, req(one("user", "ivan")...))
	decide(t, svc, req(one("user", "ivan")...))
	res = decide(t, svc, req(desc("user", "ivan"), desc("site", "s")))
	require.True(t, res.OverLimit)
	assert.Equal(t, []Header{
		{"RateLimit-Policy", `"api.user";q=3;w=60, "api.site";q=10;w=60`},
		{"RateLimit", `"api.user";r=0;t=30`},
		{"Retry-After", "30"},
	}, Headers(res))
}

// Behind a near cache that answers one descriptor's denial alone, every
// other descriptor still says what it holds: upstream's integration suite
// ([key2][key3], 20/min and 10/hour, key3 spent) once got key2 as OK with 0
// remaining and no reset, while it had 10 left.
func TestEveryDescriptorSaysWhatItHoldsBehindANearCache(t *testing.T) {
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	near, err := nearcache.New(m)
	require.NoError(t, err)
	svc, clk := newService(t, `domain: api
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 10}
`, near)
	both := req(desc("key2", "a"), desc("key3", "b"))
	for i := 0; i < 10; i++ {
		require.False(t, decide(t, svc, both).OverLimit)
	}
	for i := 0; i < 5; i++ {
		clk.Add(time.Millisecond)
		res := decide(t, svc, both)
		over, per := verdicts(res)
		require.True(t, over)
		require.Equal(t, []bool{false, true}, per, "denial %d", i)
		key2 := res.Statuses[0]
		require.True(t, key2.Asked(), "denial %d: key2 says what it holds", i)
		require.Equal(t, 10, key2.Decision.Remaining, "denial %d", i)
		require.Positive(t, key2.Decision.ResetAt.Sub(key2.Decision.At), "denial %d", i)
	}
	require.Positive(t, near.Hits(), "the cache answered key3")
}
