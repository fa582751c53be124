package service

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
)

// A request beyond the caps is refused before any matching or store call:
// 60,000 descriptors once took 15.6 s of CPU to match (quadratic), and four
// clients looping such requests held ordinary ones past Envoy's timeout.
func TestARequestBeyondTheCapsIsRefusedAtOnce(t *testing.T) {
	svc, _ := newService(t, rules)
	ctx := context.Background()
	many := make([]Descriptor, 50_000)
	for i := range many {
		many[i] = desc("user", "x"+strconv.Itoa(i%3))
	}
	_, err := svc.Decide(ctx, req(many...))
	require.ErrorIs(t, err, ErrBadRequest)
	assert.ErrorContains(t, err, "50000 descriptors, more than 64", "refused on its count, before any matching")

	deep := desc("user", "x")
	for i := 0; i < DefaultMaxEntries; i++ {
		deep.Entries = append(deep.Entries, config.Entry{Key: "k" + strconv.Itoa(i), Value: "v"})
	}
	_, err = svc.Decide(ctx, req(deep))
	require.ErrorIs(t, err, ErrBadRequest, "17 entries")

	_, err = svc.Decide(ctx, req(desc("user", strings.Repeat("v", ratelimit.MaxKeyLen))))
	require.ErrorIs(t, err, ErrBadRequest, "a value no key may hold")

	assert.Equal(t, 2, decide(t, svc, req(one("user", "x0")...)).Statuses[0].Decision.Remaining, "nothing was recorded")

	atCap := make([]Descriptor, DefaultMaxDescriptors)
	for i := range atCap {
		atCap[i] = desc("user", "y"+strconv.Itoa(i))
	}
	res := decide(t, svc, req(atCap...))
	assert.False(t, res.OverLimit, "a request at the cap is decided")
	assert.Equal(t, 2, res.Statuses[DefaultMaxDescriptors-1].Decision.Remaining)
}

// The caps are the service's options; a negative one is refused.
func TestTheCapsAreOptions(t *testing.T) {
	cfg, err := config.Parse("rules.yaml", []byte(rules))
	require.NoError(t, err)
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	svc, err := New(m, cfg, Options{Limits: Limits{Descriptors: 2, Entries: 1}})
	require.NoError(t, err)
	_, err = svc.Decide(context.Background(), req(one("user", "a")[0], one("user", "b")[0], one("user", "c")[0]))
	require.ErrorIs(t, err, ErrBadRequest)
	_, err = svc.Decide(context.Background(), req(desc("user", "a", "k", "v")))
	require.ErrorIs(t, err, ErrBadRequest)
	_, err = New(m, cfg, Options{Limits: Limits{Descriptors: -1}})
	require.ErrorIs(t, err, ratelimit.ErrInvalidArgument)
}

// Whether descriptors can be decided together is linear in their number.
func TestTogetherFindsADuplicateKey(t *testing.T) {
	l := &ratelimit.Limiter{}
	checks := []check{{limiter: l, key: "a", cost: 1}, {limiter: l, key: "b", cost: 1}}
	assert.True(t, together(checks))
	assert.False(t, together(append(checks, check{limiter: l, key: "a", cost: 1})))
	assert.False(t, together(append(checks, check{limiter: l, key: "c", cost: 2})))
	assert.True(t, together(append(checks, check{limiter: &ratelimit.Limiter{}, key: "a", cost: 1})), "another rule's limiter")
	many := make([]check, 0, 3*pairwise) // past pairwise: the map's
	for i := range cap(many) {
		many = append(many, check{limiter: l, key: fmt.Sprint(i), cost: 1})
	}
	assert.True(t, together(many))
	assert.False(t, together(append(many, check{limiter: l, key: "0", cost: 1})))
	assert.True(t, together(append(many, check{limiter: &ratelimit.Limiter{}, key: "0", cost: 1})))
}

// Overrides of different units on one descriptor count apart: a 3-per-hour
// override once admitted 5 of 30 while a 1000-per-second one wrote the
// same counter.
func TestOverridesOfDifferentUnitsCountApart(t *testing.T) {
	svc, _ := newService(t, rules)
	entries := one("user", "mallory")[0].Entries
	hourly := req(Descriptor{Entries: entries, Override: &Override{RequestsPerUnit: 3, Unit: config.Hour}})
	fast := req(Descriptor{Entries: entries, Override: &Override{RequestsPerUnit: 1000, Unit: config.Second}})
	admitted := 0
	for i := 0; i < 30; i++ {
		if !decide(t, svc, hourly).OverLimit {
			admitted++
		}
		require.False(t, decide(t, svc, fast).OverLimit)
	}
	assert.Equal(t, 3, admitted, "3 per hour, whatever the per-second override did")
}

// An unknown domain is answered as envoyproxy/ratelimit answers it: OK,
// every descriptor unlimited, and counted. It was NotFound, so with
// failure_mode_deny a rollout that reached Envoy before the configuration
// rejected traffic.
func TestAnUnknownDomainIsOKAndCounted(t *testing.T) {
	cfg, err := config.Parse("rules.yaml", []byte(rules))
	require.NoError(t, err)
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	var unknown []string
	svc, err := New(m, cfg, Options{UnknownDomain: func(d string) { unknown = append(unknown, d) }})
	require.NoError(t, err)
	res, err := svc.Decide(context.Background(), Request{Domain: "next-release", Descriptors: one("user", "x")})
	require.NoError(t, err)
	assert.False(t, res.OverLimit)
	require.Len(t, res.Statuses, 1)
	assert.Nil(t, res.Statuses[0].Rule, "not limited")
	assert.Equal(t, []string{"next-release"}, unknown)
	_, err = svc.Decide(context.Background(), Request{Domain: "next-release"})
	require.ErrorIs(t, err, ErrBadRequest, "bad input is still bad")
}

// envoyproxy/ratelimit's /json: its request shape in, its response shape
// out, 429 when over the limit.
func TestTheJSONPathSpeaksEnvoyproxysShape(t *testing.T) {
	svc, _ := newService(t, rules)
	rls := NewRLS(svc)
	post := func(body string) (int, string) {
		w := httptest.NewRecorder()
		rls.JSON(w, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(body)))
		return w.Code, w.Body.String()
	}
	body := `{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "json"}]}]}`
	for i := 0; i < 3; i++ {
		code, out := post(body)
		require.Equal(t, http.StatusOK, code, out)
		assert.Contains(t, out, `"overallCode":"OK"`)
	}
	code, out := post(body)
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Contains(t, out, `"overallCode":"OVER_LIMIT"`)
	code, _ = post(`{"domain": "api"}`)
	assert.Equal(t, http.StatusBadRequest, code)
	code, _ = post(`not json`)
	assert.Equal(t, http.StatusBadRequest, code)
}
