package service

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func post(t *testing.T, svc *Service, body string) (*http.Response, AllowResponse) {
	t.Helper()
	w := httptest.NewRecorder()
	svc.Allow(w, httptest.NewRequest(http.MethodPost, "/v1/allow", strings.NewReader(body)))
	var out AllowResponse
	if w.Code == http.StatusOK {
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out))
	}
	return w.Result(), out
}

func TestAllowAnswersTheDecisionAndTheReferenceFields(t *testing.T) {
	svc, _ := newService(t, rules+"  - key: key\n    rate_limit: {unit: second, requests_per_unit: 2}\n")
	for i := 1; i <= 3; i++ {
		resp, out := post(t, svc, `{"domain": "api", "key": "k1"}`)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, i <= 2, out.Allowed, "request %d", i)
		assert.Equal(t, min(i, 2), out.CurrentCount)
		assert.Equal(t, int64(1000), out.TTL, "milliseconds until the second's window ends")
		assert.Equal(t, 2, out.Limit)
		assert.NotEmpty(t, resp.Header.Get("RateLimit"))
		if i == 3 {
			assert.Equal(t, "OVER_LIMIT", out.Statuses[0].Code)
			assert.Equal(t, int64(1000), out.RetryAfter)
			assert.Equal(t, "1", resp.Header.Get("Retry-After"))
		}
	}
	_, out := post(t, svc, `{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "u"}], "cost": 3}, {"entries": [{"key": "nobody", "value": "x"}]}]}`)
	assert.True(t, out.Allowed)
	assert.Equal(t, 0, out.Remaining, "the deciding limit is the user's")
	assert.False(t, out.Statuses[1].Limited)
}

func TestAllowRejectsBadRequestsWithTheirStatus(t *testing.T) {
	svc, _ := newService(t, rules)
	svc.strict = true // an unknown domain is 404 (StrictDomains)
	for body, code := range map[string]int{
		`{"domain": "api", "key": "k", "cost": -1}`:                                                    http.StatusBadRequest,
		`{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "u"}], "cost": -2}]}`: http.StatusBadRequest,
		`{"domain": "api"}`: http.StatusBadRequest,
		`{"domain": "api", "key": "k", "descriptors": [{"entries": [{"key": "user", "value": "u"}]}]}`: http.StatusBadRequest,
		`{"domain": "api", "key": "k", "extra": 1}`:                                                    http.StatusBadRequest,
		`not json`:                       http.StatusBadRequest,
		`{"domain": "nope", "key": "k"}`: http.StatusNotFound,
	} {
		resp, _ := post(t, svc, body)
		assert.Equal(t, code, resp.StatusCode, body)
	}
	w := httptest.NewRecorder()
	svc.Allow(w, httptest.NewRequest(http.MethodGet, "/v1/allow", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, w.Code)
}

func TestShouldRateLimitSpeaksEnvoysAPI(t *testing.T) {
	svc, _ := newService(t, rules)
	rls := NewRLS(svc, WithIETFHeaders())
	ctx := context.Background()
	entry := func(k, v string) []*rlv3.RateLimitDescriptor_Entry {
		return []*rlv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}
	}
	in := &rlsv3.RateLimitRequest{Domain: "api", HitsAddend: 2, Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: entry("user", "u")},
		{Entries: entry("internal", "i")},
		{Entries: entry("nobody", "n")},
		{Entries: entry("site", "s"), HitsAddend: wrapperspb.UInt64(2)},
	}}
	out, err := rls.ShouldRateLimit(ctx, in)
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, out.OverallCode)
	require.Len(t, out.Statuses, 4)
	u := out.Statuses[0]
	assert.Equal(t, uint32(1), u.LimitRemaining, "hits_addend 2 of 3")
	assert.Equal(t, uint32(3), u.CurrentLimit.RequestsPerUnit)
	assert.Equal(t, rlsv3.RateLimitResponse_RateLimit_MINUTE, u.CurrentLimit.Unit)
	assert.Equal(t, int64(60), u.DurationUntilReset.Seconds)
	assert.Equal(t, uint32(1<<32-1), out.Statuses[1].LimitRemaining, "unlimited, as envoyproxy/ratelimit answers")
	assert.Nil(t, out.Statuses[2].CurrentLimit)
	assert.Len(t, out.ResponseHeadersToAdd, 2, "the IETF fields, asked for")
	assert.Nil(t, out.DynamicMetadata, "not asked for")

	out, err = rls.ShouldRateLimit(ctx, in)
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, out.OverallCode)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, out.Statuses[0].Code)
	assert.Equal(t, "Retry-After", out.ResponseHeadersToAdd[2].Key)

	svc.strict = true // an unknown domain is NotFound (StrictDomains)
	for _, tc := range []struct {
		in   *rlsv3.RateLimitRequest
		code codes.Code
	}{
		{&rlsv3.RateLimitRequest{Domain: "api"}, codes.InvalidArgument},
		{&rlsv3.RateLimitRequest{Descriptors: in.Descriptors}, codes.InvalidArgument},
		{&rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{{}}}, codes.InvalidArgument},
		{&rlsv3.RateLimitRequest{Domain: "other", Descriptors: in.Descriptors}, codes.NotFound},
		{&rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: entry("user", "u"), Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 42}}}}, codes.InvalidArgument},
	} {
		_, err := rls.ShouldRateLimit(ctx, tc.in)
		assert.Equal(t, tc.code, status.Code(err), "%v: %v", tc.in, err)
	}
}
