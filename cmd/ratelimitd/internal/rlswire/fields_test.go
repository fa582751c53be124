package rlswire

import (
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The codec knows each message's fields by number: a field a newer
// go-control-plane adds would be dropped by its encoder, or sent to proto
// by its decoder without a word. This fails on such an upgrade, for the
// codec to learn the field (or hand its messages to proto) first.
func TestTheCodecKnowsEveryFieldOfItsMessages(t *testing.T) {
	for _, tc := range []struct {
		m      protoreflect.ProtoMessage
		fields []protoreflect.FieldNumber
	}{
		{&rlsv3.RateLimitRequest{}, []protoreflect.FieldNumber{1, 2, 3}},
		{&rlv3.RateLimitDescriptor{}, []protoreflect.FieldNumber{1, 2, 3}},
		{&rlv3.RateLimitDescriptor_Entry{}, []protoreflect.FieldNumber{1, 2}},
		{&rlv3.RateLimitDescriptor_RateLimitOverride{}, []protoreflect.FieldNumber{1, 2}},
		{&wrapperspb.UInt64Value{}, []protoreflect.FieldNumber{1}},
		// The response: 5, 6 and 7 (raw body, dynamic metadata, quota)
		// are proto's to write, as a status's 5 (quota).
		{&rlsv3.RateLimitResponse{}, []protoreflect.FieldNumber{1, 2, 3, 4, 5, 6, 7}},
		{&rlsv3.RateLimitResponse_DescriptorStatus{}, []protoreflect.FieldNumber{1, 2, 3, 4, 5}},
		{&rlsv3.RateLimitResponse_RateLimit{}, []protoreflect.FieldNumber{1, 2, 3}},
		{&corev3.HeaderValue{}, []protoreflect.FieldNumber{1, 2, 3}},
		{&durationpb.Duration{}, []protoreflect.FieldNumber{1, 2}},
	} {
		fs := tc.m.ProtoReflect().Descriptor().Fields()
		var got []protoreflect.FieldNumber
		for i := range fs.Len() {
			got = append(got, fs.Get(i).Number())
		}
		slices.Sort(got)
		require.Equal(t, tc.fields, got, "%s", tc.m.ProtoReflect().Descriptor().FullName())
	}
}
