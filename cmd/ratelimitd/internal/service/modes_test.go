package service

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
)

// The quota pools of envoyproxy/ratelimit's examples (example.yaml's
// service_1 and service_2, and quota.sh), its integration test's two
// descriptors (another.yaml's key2 and key3), and a plain limit.
const modes = `domain: api
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
`

func newModes(t *testing.T, o Options) *Service {
	t.Helper()
	cfg, err := config.Parse("modes.yaml", []byte(modes))
	require.NoError(t, err)
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	clk := newClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	o.Limiter = []ratelimit.Option{ratelimit.WithCallerClock(clk.Now)}
	svc, err := New(m, cfg, o)
	require.NoError(t, err)
	return svc
}

// quota.sh: the pools are debited together, and a request is over only
// once every pool it matches is spent.
func TestQuotaPoolsAreOverOnlyWhenEverOneIsSpent(t *testing.T) {
	for _, o := range []Options{{}, {CountOverLimit: true}} {
		svc := newModes(t, o)
		pools := req(desc("service", "service_1"), desc("service", "service_2"))
		over, per := verdicts(decide(t, svc, pools))
		assert.Equal(t, []bool{false, false}, per, "count %v", o.CountOverLimit)
		assert.False(t, over)
		over, per = verdicts(decide(t, svc, pools))
		assert.Equal(t, []bool{true, false}, per, "service_1's pool is spent, service_2's is not")
		assert.False(t, over, "one pool left: the request passes")
		over, per = verdicts(decide(t, svc, pools))
		assert.Equal(t, []bool{true, true}, per)
		assert.True(t, over, "every pool spent")
	}
}

// A request that its pools deny consumes nothing from its other limits, and
// one that another limit denies consumes nothing from its pools (the
// default counting).
func TestAPoolsDenialGivesBackTheOtherLimits(t *testing.T) {
	svc := newModes(t, Options{})
	one := req(desc("service", "service_1"), desc("key2", "a"))
	require.False(t, decide(t, svc, one).OverLimit)
	res := decide(t, svc, one)
	require.True(t, res.OverLimit, "service_1 is its only pool, spent")
	assert.Equal(t, 20-1-1, decide(t, svc, req(desc("key2", "a"))).Statuses[0].Decision.Remaining,
		"the denied request's admission by key2 was given back: 20, less the first and this one")

	// Two enforced limits, decided together (a Multi), are both given back.
	svc = newModes(t, Options{})
	two := req(desc("service", "service_1"), desc("key2", "b"), desc("key3", "b"))
	require.False(t, decide(t, svc, two).OverLimit)
	require.True(t, decide(t, svc, two).OverLimit, "service_1 is its only pool, spent")
	both := decide(t, svc, req(desc("key2", "b"), desc("key3", "b")))
	assert.Equal(t, 20-1-1, both.Statuses[0].Decision.Remaining, "key2's admission given back")
	assert.Equal(t, 10-1-1, both.Statuses[1].Decision.Remaining, "key3's admission given back")

	svc = newModes(t, Options{})
	require.False(t, decide(t, svc, req(desc("user", "u"))).OverLimit)
	res = decide(t, svc, req(desc("user", "u"), desc("service", "service_2")))
	assert.True(t, res.OverLimit, "user's 1 per minute is spent")
	assert.False(t, res.Statuses[1].OverLimit)
	assert.Equal(t, 2, res.Statuses[1].Decision.Remaining, "the pool was only peeked")
}

// QUOTA_MODE makes every rule a pool.
func TestQuotaModeMakesEveryRuleAPool(t *testing.T) {
	svc := newModes(t, Options{QuotaMode: true})
	r := req(desc("user", "u"), desc("key2", "b"))
	require.False(t, decide(t, svc, r).OverLimit)
	over, per := verdicts(decide(t, svc, r))
	assert.Equal(t, []bool{true, false}, per)
	assert.False(t, over, "user's limit is a pool now, and key2's is open")
}

// SHADOW_MODE answers OK to every request, its statuses and counts as
// usual.
func TestShadowModeAnswersOKAndRecords(t *testing.T) {
	svc := newModes(t, Options{ShadowMode: true})
	r := req(desc("user", "s"))
	require.False(t, decide(t, svc, r).OverLimit)
	res := decide(t, svc, r)
	assert.False(t, res.OverLimit)
	assert.True(t, res.Shadowed)
	assert.True(t, res.Statuses[0].OverLimit, "the descriptor's own verdict stays")
}

// Upstream's integration test: [key2][key3] (20 per minute, 10 per hour)
// 15 times. key3 denies from the 11th on; key2 counts every hit when
// upstream counts (its default), and keeps 10 when a denial counts nothing
// (ratelimitd's default, upstream's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
func TestTwoDescriptorsCountAsUpstreamSays(t *testing.T) {
	for _, countAll := range []bool{false, true} {
		svc := newModes(t, Options{CountOverLimit: countAll})
		r := req(desc("key2", "7"), desc("key3", "7"))
		for i := 0; i < 15; i++ {
			res := decide(t, svc, r)
			want2, want3 := 20-(i+1), max(0, 10-(i+1))
			if i >= 10 && !countAll {
				want2 = 10
			}
			assert.Equal(t, i >= 10, res.OverLimit, "count %v, request %d", countAll, i)
			assert.False(t, res.Statuses[0].OverLimit, "count %v, request %d", countAll, i)
			assert.Equal(t, i >= 10, res.Statuses[1].OverLimit, "count %v, request %d", countAll, i)
			assert.Equal(t, want2, res.Statuses[0].Decision.Remaining, "count %v, request %d: key2", countAll, i)
			assert.Equal(t, want3, res.Statuses[1].Decision.Remaining, "count %v, request %d: key3", countAll, i)
			assert.True(t, res.Statuses[0].Asked(), "key2's status is its own, with a reset")
		}
	}
}

// Counted as upstream counts, an expensive request that a limit denies
// still counts, so a cheaper one after it is denied too.
func TestCountingEveryHitKeepsDenyingAfterAnExpensiveDenial(t *testing.T) {
	for _, countAll := range []bool{false, true} {
		svc := newModes(t, Options{CountOverLimit: countAll})
		heavy := Request{Domain: "api", Cost: 15, Descriptors: []Descriptor{desc("key3", "h")}}
		assert.True(t, decide(t, svc, heavy).OverLimit)
		light := Request{Domain: "api", Cost: 1, Descriptors: []Descriptor{desc("key3", "h")}}
		assert.Equal(t, countAll, decide(t, svc, light).OverLimit, "count %v", countAll)
	}
}

// also: a descriptor limited 3 a minute and 5 an hour is decided under
// both, together with the request's other descriptors: the answer names
// the limit that binds, and a denial by either consumes neither.
func TestSeveralLimitsOnOneDescriptorAreDecidedTogether(t *testing.T) {
	cfg, err := config.Parse("also.yaml", []byte(`domain: api
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 3
      also:
        - {unit: hour, requests_per_unit: 5}
  - key: site
    rate_limit: {unit: hour, requests_per_unit: 100}
`))
	require.NoError(t, err)
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	clk := newClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	svc, err := New(m, cfg, Options{Limiter: []ratelimit.Option{ratelimit.WithCallerClock(clk.Now)}})
	require.NoError(t, err)
	r := req(desc("user", "u"), desc("site", "s"))
	var got []string
	for minute := 0; minute < 3; minute++ {
		for i := 0; i < 3; i++ {
			res := decide(t, svc, r)
			st := res.Statuses[0]
			got = append(got, fmt.Sprintf("%v:%d/%d", res.OverLimit, st.Decision.Remaining, st.Rule.RequestsPerUnit))
		}
		clk.Add(time.Minute)
	}
	assert.Equal(t, []string{
		"false:2/3", "false:1/3", "false:0/3", // the minute binds: 2 left of 3 beside 4 of 5
		"false:1/5", "false:0/5", "true:0/5", // then the hour
		"true:0/5", "true:0/5", "true:0/5",
	}, got)
	site := decide(t, svc, req(desc("site", "s"))).Statuses[0].Decision.Remaining
	assert.Equal(t, 100-5-1, site, "the 4 denied requests consumed nothing from site")
}
