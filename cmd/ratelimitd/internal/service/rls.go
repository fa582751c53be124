package service

import (
	"context"
	"errors"
	"math"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
)

// RLS serves Envoy's envoy.service.ratelimit.v3.RateLimitService.
type RLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	svc      *Service
	ietf     bool           // WithIETFHeaders
	upstream *upstreamNames // WithUpstreamHeaders
	metadata bool           // WithDynamicMetadata
}

// NewRLS returns the gRPC service deciding with svc.
func NewRLS(svc *Service, opts ...RLSOption) *RLS {
	r := &RLS{svc: svc}
	for _, o := range opts {
		o(r)
	}
	return r
}

// ShouldRateLimit decides a request as envoyproxy/ratelimit does (see
// Service.Decide for where it differs): OVER_LIMIT overall when any enforced
// descriptor is over its limit, and one status per descriptor; headers and
// dynamic metadata as its options say.
func (r *RLS) ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	req := Request{Domain: in.GetDomain(), Cost: uint64(in.GetHitsAddend()), Descriptors: make([]Descriptor, len(in.GetDescriptors()))}
	n := 0
	for _, d := range in.GetDescriptors() {
		n += len(d.GetEntries())
	}
	entries := make([]config.Entry, n) // every descriptor's, in one allocation
	for i, d := range in.GetDescriptors() {
		req.Descriptors[i], entries = fromEnvoy(d, entries)
	}
	res, err := r.svc.Decide(ctx, req)
	if err != nil {
		return nil, grpcError(ctx, err)
	}
	out := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(res.Statuses)),
	}
	if res.OverLimit {
		out.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	slab := newStatusSlab(len(res.Statuses))
	for i, st := range res.Statuses {
		out.Statuses[i] = slab.toEnvoy(st)
	}
	var headers []Header
	if r.upstream != nil {
		headers = append(headers, r.upstreamHeaders(res, out.Statuses)...)
	}
	if r.ietf {
		headers = append(headers, Headers(res)...)
	}
	for _, h := range headers {
		out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &corev3.HeaderValue{Key: h.Name, Value: h.Value})
	}
	if r.metadata {
		out.DynamicMetadata = r.dynamicMetadata(in, res)
	}
	return out, nil
}

// fromEnvoy is d, its entries taken from the front of entries (room for
// them all), and what is left of entries.
func fromEnvoy(d *rlv3.RateLimitDescriptor, entries []config.Entry) (Descriptor, []config.Entry) {
	n := len(d.GetEntries())
	out := Descriptor{Entries: entries[:n:n]}
	if h := d.GetHitsAddend(); h != nil { // set, 0 included: a check that counts nothing
		cost := h.GetValue()
		out.Cost = &cost
	}
	for j, e := range d.GetEntries() {
		out.Entries[j] = config.Entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	if o := d.GetLimit(); o != nil {
		out.Override = &Override{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: config.Unit(o.GetUnit())}
	}
	return out, entries[n:]
}

// statusSlab holds the messages of a response's statuses, one allocation
// for each kind rather than three a status.
type statusSlab struct {
	statuses  []rlsv3.RateLimitResponse_DescriptorStatus
	limits    []rlsv3.RateLimitResponse_RateLimit
	durations []durationpb.Duration
}

func newStatusSlab(n int) statusSlab {
	return statusSlab{
		statuses:  make([]rlsv3.RateLimitResponse_DescriptorStatus, n),
		limits:    make([]rlsv3.RateLimitResponse_RateLimit, n),
		durations: make([]durationpb.Duration, n),
	}
}

// next takes the next status's messages from the slab.
func (s *statusSlab) next() (*rlsv3.RateLimitResponse_DescriptorStatus, *rlsv3.RateLimitResponse_RateLimit, *durationpb.Duration) {
	st, l, d := &s.statuses[0], &s.limits[0], &s.durations[0]
	s.statuses, s.limits, s.durations = s.statuses[1:], s.limits[1:], s.durations[1:]
	return st, l, d
}

// toEnvoy is st as Envoy's status, in messages from the slab.
func (s *statusSlab) toEnvoy(st Status) *rlsv3.RateLimitResponse_DescriptorStatus {
	out, limit, until := s.next()
	out.Code = rlsv3.RateLimitResponse_OK
	switch {
	case st.Rule == nil:
		return out
	case st.Rule.Unlimited:
		out.LimitRemaining = math.MaxUint32
		return out
	}
	if st.OverLimit {
		out.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	limit.Name, limit.RequestsPerUnit, limit.Unit = st.Rule.Name, st.Rule.RequestsPerUnit, rlsv3.RateLimitResponse_RateLimit_Unit(st.Rule.Unit)
	out.CurrentLimit = limit
	if st.Asked() {
		out.LimitRemaining = uint32(min(st.Decision.Remaining, math.MaxUint32))
		d := st.Decision.ResetAt.Sub(st.Decision.At)
		until.Seconds, until.Nanos = int64(d/time.Second), int32(d%time.Second) // durationpb.New's
		out.DurationUntilReset = until
	}
	return out
}

// grpcError maps Decide's errors to status codes: InvalidArgument for a bad
// request, NotFound for an unknown domain, the context's code when the
// caller went away or its own deadline passed, and Unavailable for every
// failure of the store, its time budget running out included (Envoy's
// filter then applies its failure_mode_deny): a store timeout was once
// DeadlineExceeded, which the docs did not promise.
func grpcError(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, ErrBadRequest):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrUnknownDomain):
		return status.Error(codes.NotFound, err.Error())
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	default:
		return status.Error(codes.Unavailable, err.Error())
	}
}
