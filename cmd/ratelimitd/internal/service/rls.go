package service

import (
	"context"
	"errors"
	"math"

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
	for i, d := range in.GetDescriptors() {
		req.Descriptors[i] = fromEnvoy(d)
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
	for i, st := range res.Statuses {
		out.Statuses[i] = toEnvoy(st)
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

func fromEnvoy(d *rlv3.RateLimitDescriptor) Descriptor {
	out := Descriptor{Entries: make([]config.Entry, len(d.GetEntries()))}
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
	return out
}

func toEnvoy(st Status) *rlsv3.RateLimitResponse_DescriptorStatus {
	out := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
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
	out.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
		Name:            st.Rule.Name,
		RequestsPerUnit: st.Rule.RequestsPerUnit,
		Unit:            rlsv3.RateLimitResponse_RateLimit_Unit(st.Rule.Unit),
	}
	if st.Asked() {
		out.LimitRemaining = uint32(min(st.Decision.Remaining, math.MaxUint32))
		out.DurationUntilReset = durationpb.New(st.Decision.ResetAt.Sub(st.Decision.At))
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
