package service

import (
	"context"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func costOf(n uint64) *uint64 { return &n }

const tokenRules = `domain: ai
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: model
    rate_limit: {unit: minute, requests_per_unit: 10}
`

// ask sends Envoy's request of descriptors {user: ann} with the given
// per-descriptor hits_addend (nil: unset), as the AI Gateway does, and
// returns the code and the remaining quota.
func ask(t *testing.T, rls *RLS, hits *uint64) (rlsv3.RateLimitResponse_Code, uint32) {
	t.Helper()
	d := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "ann"}}}
	if hits != nil {
		d.HitsAddend = wrapperspb.UInt64(*hits)
	}
	res, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*rlv3.RateLimitDescriptor{d}})
	require.NoError(t, err)
	return res.GetOverallCode(), res.GetStatuses()[0].GetLimitRemaining()
}

// Envoy's AI Gateway checks a token budget when a request arrives (a
// per-descriptor hits_addend of 0) and reports the tokens used when the
// response ends (hits_addend = tokens). A check used to cost 1 (an
// explicit 0 read as unset: remaining 19, 18, 17 where upstream answers
// 20, 20, 20), and a report past the budget was denied and dropped, so
// 6,600 tokens reported against 1,000 a minute were 905 recorded and every
// answer OK. As envoyproxy/ratelimit master: checks count nothing; a report
// counts whatever the quota, over once the count passes the limit; from the
// first overshoot on, every check is over.
func TestTheAIGatewaySequenceIsOverAfterTheFirstOvershoot(t *testing.T) {
	svc, _ := newService(t, tokenRules)
	rls := NewRLS(svc)
	for range 3 {
		code, left := ask(t, rls, costOf(0))
		require.Equal(t, rlsv3.RateLimitResponse_OK, code)
		require.Equal(t, uint32(1000), left, "a check counts nothing")
	}
	code, left := ask(t, rls, costOf(700))
	require.Equal(t, rlsv3.RateLimitResponse_OK, code, "700 of 1,000")
	require.Equal(t, uint32(300), left)
	code, _ = ask(t, rls, costOf(0))
	require.Equal(t, rlsv3.RateLimitResponse_OK, code, "300 left: the check passes")
	code, left = ask(t, rls, costOf(1200))
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, code, "the report that overshoots is over, and counted")
	require.Zero(t, left)
	for range 3 {
		code, _ = ask(t, rls, costOf(0))
		require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, code, "every check after the overshoot")
	}
	code, _ = ask(t, rls, nil)
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, code, "and every request")

	// A check at exactly the limit is not over (the count has not passed
	// it), as upstream's count + 0 > limit.
	svc, _ = newService(t, tokenRules)
	rls = NewRLS(svc)
	ask(t, rls, costOf(1000))
	code, left = ask(t, rls, costOf(0))
	require.Equal(t, rlsv3.RateLimitResponse_OK, code)
	require.Zero(t, left)
}
