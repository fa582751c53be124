package rlqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
)

// Server serves StreamRateLimitQuotas. Each stream is a data plane; each
// bucket it reports is matched to the configuration's rules as a
// descriptor whose entries are the bucket id's (see match), and the
// planes reporting one bucket id share its rule's limit by their demand
// (an Allocator's rules, kept by a Ledger: in this process, or on the
// store for every instance). A plane is answered on each report with its
// grant for every bucket in it, as a token bucket (see assignment).
type Server struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	config func() *config.Config
	ledger Ledger
	ttl    time.Duration
	// instance names this process's planes apart from other instances'
	// (their ids share the ledger); planes counts its streams.
	instance string
	planes   atomic.Int64
}

// NewServer returns a server deciding by the configuration cfg returns
// (read on every report: reloads apply), keeping the shares in ledger,
// whose assignments live ttl (1ms at least).
func NewServer(cfg func() *config.Config, ledger Ledger, ttl time.Duration) *Server {
	var id [6]byte
	_, _ = rand.Read(id[:]) // crypto/rand: never fails (Go 1.24)
	return &Server{config: cfg, ledger: ledger, ttl: max(ttl, time.Millisecond), instance: hex.EncodeToString(id[:])}
}

// StreamRateLimitQuotas implements the service: reports in, assignments
// out, until the plane ends the stream. Its buckets' planes forget it then
// (its holds end with their TTL).
func (s *Server) StreamRateLimitQuotas(stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	plane := s.instance + "-" + strconv.FormatInt(s.planes.Add(1), 10)
	reported := map[string]*usage{} // by bucket key
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), forgetBound)
		defer cancel()
		for k, u := range reported {
			_ = s.ledger.Forget(ctx, k, u.window, s.ttl, plane) // failed: the plane is dropped after two TTLs of silence
		}
	}()
	for {
		in, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := bounded(in, reported); err != nil {
			return err
		}
		if out := s.report(stream.Context(), plane, in, reported); len(out.BucketAction) > 0 {
			if err := stream.Send(out); err != nil {
				return err
			}
		}
	}
}

// A stream's bounds: one plane cannot make the service keep, or match,
// more than these (a plane's buckets are its routes' few; a stream past
// them ends InvalidArgument).
const (
	maxBuckets = 1000 // distinct buckets a stream reports
	maxEntries = 16   // entries of a bucket id (ratelimitd's -max-entries default)
	maxIDBytes = 4096 // bytes of a bucket id's keys and values
)

// bounded checks a report against a stream's bounds.
func bounded(in *rlqsv3.RateLimitQuotaUsageReports, reported map[string]*usage) error {
	if n := len(in.GetBucketQuotaUsages()); n > maxBuckets {
		return status.Errorf(codes.InvalidArgument, "rlqs: %d bucket usages in a report, more than %d", n, maxBuckets)
	}
	fresh := 0
	for _, u := range in.GetBucketQuotaUsages() {
		id := u.GetBucketId().GetBucket()
		size := 0
		for k, v := range id {
			size += len(k) + len(v)
		}
		if len(id) > maxEntries || size > maxIDBytes {
			return status.Errorf(codes.InvalidArgument, "rlqs: a bucket id of %d entries and %d bytes, more than %d or %d", len(id), size, maxEntries, maxIDBytes)
		}
		if reported[bucketKey(in.GetDomain(), id)] == nil {
			fresh++
		}
	}
	if len(reported)+fresh > maxBuckets {
		return status.Errorf(codes.InvalidArgument, "rlqs: more than %d buckets on one stream", maxBuckets)
	}
	return nil
}

// forgetBound bounds telling the ledger that a stream ended.
const forgetBound = 5 * time.Second

// report records one plane's usage report and returns its assignments. A
// bucket whose ledger failed gets no answer: the plane keeps its
// assignment until its TTL ends, and then denies (what the bound asks of
// it).
func (s *Server) report(ctx context.Context, plane string, in *rlqsv3.RateLimitQuotaUsageReports, reported map[string]*usage) *rlqsv3.RateLimitQuotaResponse {
	cfg := s.config()
	out := &rlqsv3.RateLimitQuotaResponse{}
	for _, u := range in.GetBucketQuotaUsages() {
		id := u.GetBucketId().GetBucket()
		if len(id) == 0 {
			continue // no bucket: nothing to answer
		}
		action := &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: u.GetBucketId()}
		rule := match(cfg, in.GetDomain(), id)
		switch {
		case rule == nil || rule.Unlimited || rule.Shadow: // as RLS: not limited (a shadow rule answers OK)
			action.BucketAction = blanket(typev3.RateLimitStrategy_ALLOW_ALL, s.ttl)
		case rule.DeniesAll():
			action.BucketAction = blanket(typev3.RateLimitStrategy_DENY_ALL, s.ttl)
		default:
			key, window := bucketKey(in.GetDomain(), id), windowOf(rule)
			use := reported[key]
			if use == nil {
				use = &usage{}
				reported[key] = use
			}
			use.window = window
			g, err := s.ledger.Grant(ctx, key, window, int64(rule.RequestsPerUnit), s.ttl, plane, use.demand(u))
			if err != nil {
				continue
			}
			action.BucketAction = assignment(g, window, s.ttl)
		}
		out.BucketAction = append(out.BucketAction, action)
	}
	return out
}

// windowOf is a rule's window: its unit's, or the window extension's. (A
// rule's further limits, the also extension, are not split yet: its first
// limit is.)
func windowOf(r *config.Rule) time.Duration {
	if r.Window > 0 {
		return r.Window
	}
	return r.Unit.Duration()
}

// usage is what one plane's reports on one bucket asked since its demand
// was last told.
type usage struct {
	window   time.Duration
	requests float64       // allowed and denied
	elapsed  time.Duration // the time they cover
}

// demandSpan is the least time a demand is told over: a report over less
// (a bucket's first, or the one an Envoy sends at once when an answer
// changes its assignment) adds to the next.
const demandSpan = 100 * time.Millisecond

// demand adds u's report and returns the demand it tells, in requests a
// window, or -1 when the reports so far cover less than demandSpan (the
// last demand stands).
func (use *usage) demand(u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) int64 {
	use.requests += float64(u.GetNumRequestsAllowed()) + float64(u.GetNumRequestsDenied())
	use.elapsed += max(u.GetTimeElapsed().AsDuration(), 0)
	if use.elapsed < demandSpan {
		return -1
	}
	n := math.Ceil(use.requests * float64(use.window) / float64(use.elapsed))
	use.requests, use.elapsed = 0, 0
	return int64(math.Min(n, math.MaxInt32))
}

// assignment is a grant of n requests a window, for ttl, as a token
// bucket refilled one token every window/n (rounded up: never faster) and
// holding a tenth of n at most (1 at least): over any window a plane
// admits n and a tenth of n more at most. A grant of 0 denies all.
func assignment(n int64, window, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_ {
	strategy := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	if n > 0 {
		fill := (window + time.Duration(n) - 1) / time.Duration(n)
		strategy.Strategy = &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens: uint32(max((n+9)/10, 1)), TokensPerFill: wrapperspb.UInt32(1), FillInterval: durationpb.New(fill),
		}}
	}
	return &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
		AssignmentTimeToLive: durationpb.New(ttl), RateLimitStrategy: strategy,
	}}
}

func blanket(rule typev3.RateLimitStrategy_BlanketRule, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_ {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
		AssignmentTimeToLive: durationpb.New(ttl),
		RateLimitStrategy:    &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}},
	}}
}

// match finds the rule of a bucket id: its entries as a descriptor's, in
// the first order of their keys (sorted, then each permutation in turn)
// that the domain's tree matches, since a bucket id has no order. Ids of
// more than 4 entries are tried in key order only (24 orders at most: a
// report of many unmatched buckets costs a bounded number of walks).
func match(cfg *config.Config, domain string, id map[string]string) *config.Rule {
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	entries := make([]config.Entry, len(keys))
	try := func() *config.Rule {
		for i, k := range keys {
			entries[i] = config.Entry{Key: k, Value: id[k]}
		}
		r, _ := cfg.Match(domain, entries)
		return r
	}
	if len(keys) > 4 {
		return try()
	}
	var r *config.Rule
	permute(keys, 0, func() bool { r = try(); return r != nil })
	return r
}

// permute calls f with keys in each order, lexicographic from sorted keys,
// until f returns true.
func permute(keys []string, k int, f func() bool) bool {
	if k == len(keys) {
		return f()
	}
	for i := k; i < len(keys); i++ {
		keys[k], keys[i] = keys[i], keys[k]
		slices.Sort(keys[k+1:])
		if permute(keys, k+1, f) {
			return true
		}
		slices.Sort(keys[k:])
	}
	return false
}

// bucketKey names a domain's bucket id: its entries sorted, each length
// prefixed, so that no two ids share a name.
func bucketKey(domain string, id map[string]string) string {
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString(strconv.Itoa(len(domain)) + ":" + domain)
	for _, k := range keys {
		b.WriteString(strconv.Itoa(len(k)) + ":" + k + strconv.Itoa(len(id[k])) + ":" + id[k])
	}
	return b.String()
}
