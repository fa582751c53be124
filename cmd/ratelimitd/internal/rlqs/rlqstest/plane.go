// Package rlqstest is a data plane of Envoy's Rate Limit Quota Service for
// tests, following the protocol as Envoy's rate_limit_quota filter does
// for one bucket: it enforces the last assignment it received with a token
// bucket (none yet, or one expired: deny all, the behaviour the server's
// bound asks of planes), reports what it allowed and denied, and reports
// again at once when an answer changed its assignment.
package rlqstest

import (
	"fmt"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Plane is one data plane's bucket on its stream.
type Plane struct {
	Stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	Domain string
	Bucket *rlqsv3.BucketId
	// Clock is when an answer arrives (its TTL counts from then); nil:
	// time.Now.
	Clock func() time.Time

	allowed, denied uint64 // since the last report
	deny            bool   // DENY_ALL, or no assignment yet
	tokens, size    float64
	fill            time.Duration // a token each; 0: no token bucket
	until           time.Time     // the assignment's end
}

// Serve admits, of the requests arriving evenly at demand a second over
// (from, to], those the assignment allows, and returns when each admitted
// one arrived.
func (p *Plane) Serve(from, to time.Time, demand float64) []time.Time {
	var admitted []time.Time
	if demand <= 0 {
		return nil
	}
	gap := time.Duration(float64(time.Second) / demand)
	for at := from.Add(gap); !at.After(to); at = at.Add(gap) {
		if p.fill > 0 {
			p.tokens = min(p.size, p.tokens+float64(gap)/float64(p.fill))
		}
		if p.fill == 0 || !at.Before(p.until) || p.tokens < 1 {
			p.denied++
			continue
		}
		p.tokens--
		p.allowed++
		admitted = append(admitted, at)
	}
	return admitted
}

// Size is the assignment's token bucket size: what it may admit at once
// past its rate (0: none).
func (p *Plane) Size() int { return int(p.size) }

// Report sends the usage since the last report, which covers elapsed, and
// applies the answer; an answer that changed the assignment is reported at
// once (its usage since: none), three times at most. sent is the reports
// it sent: the service's calls.
func (p *Plane) Report(elapsed time.Duration) (sent int, err error) {
	for range 3 {
		if err := p.Stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: p.Domain, BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
			BucketId: p.Bucket, TimeElapsed: durationpb.New(elapsed), NumRequestsAllowed: p.allowed, NumRequestsDenied: p.denied,
		}}}); err != nil {
			return sent, err
		}
		sent++
		p.allowed, p.denied, elapsed = 0, 0, 0
		res, err := p.Stream.Recv()
		if err != nil {
			return sent, err
		}
		if len(res.GetBucketAction()) != 1 {
			return sent, fmt.Errorf("rlqstest: %d bucket actions for one bucket", len(res.GetBucketAction()))
		}
		now := time.Now()
		if p.Clock != nil {
			now = p.Clock()
		}
		if !p.apply(res.GetBucketAction()[0].GetQuotaAssignmentAction(), now) {
			return sent, nil
		}
	}
	return sent, nil
}

// apply makes a the assignment from now, and reports whether it changed
// the strategy (a TTL's extension does not). A new token bucket starts
// full, as Envoy's does.
func (p *Plane) apply(a *rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction, now time.Time) (changed bool) {
	p.until = now.Add(a.GetAssignmentTimeToLive().AsDuration())
	if tb := a.GetRateLimitStrategy().GetTokenBucket(); tb != nil {
		fill := tb.GetFillInterval().AsDuration() / time.Duration(max(tb.GetTokensPerFill().GetValue(), 1))
		changed = p.deny || fill != p.fill || float64(tb.GetMaxTokens()) != p.size
		if changed {
			p.tokens = float64(tb.GetMaxTokens())
		}
		p.deny, p.fill, p.size = false, fill, float64(tb.GetMaxTokens())
		return changed
	}
	deny := a.GetRateLimitStrategy().GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL
	changed = deny != p.deny || p.fill != 0
	p.deny, p.fill, p.size = deny, 0, 0
	return changed
}
