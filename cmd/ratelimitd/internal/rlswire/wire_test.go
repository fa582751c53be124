package rlswire

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func entries(kv ...string) []*rlv3.RateLimitDescriptor_Entry {
	var out []*rlv3.RateLimitDescriptor_Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// requests are requests of the plain shape, as Envoy sends them.
func requests() []*rlsv3.RateLimitRequest {
	return []*rlsv3.RateLimitRequest{
		{},
		{Domain: "api"},
		{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: entries("user", "alice")}}},
		{Domain: "api", HitsAddend: 7, Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: entries("user", "alice", "path", "/v1/x")},
			{Entries: entries("remote_address", "10.0.0.1")},
			{Entries: entries("d2", "ü€😀", "", "")},
		}},
		{Domain: "api", HitsAddend: 1<<32 - 1, Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: entries("k", "v"), Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1<<32 - 1, Unit: typev3.RateLimitUnit_HOUR}},
			{Entries: entries("k", "v"), HitsAddend: &wrapperspb.UInt64Value{Value: 1<<64 - 1}},
			{Entries: entries("k", "v"), HitsAddend: &wrapperspb.UInt64Value{}},
			{Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{Unit: -3}},
			{},
		}},
		{Domain: strings.Repeat("d", 2000), Descriptors: []*rlv3.RateLimitDescriptor{{Entries: entries("k", strings.Repeat("v", 300))}}},
	}
}

// decodeByProto is what gRPC's own codec makes of b.
func decodeByProto(b []byte) (*rlsv3.RateLimitRequest, error) {
	m := &rlsv3.RateLimitRequest{}
	return m, proto.Unmarshal(b, m)
}

func decodeByCodec(b []byte) (*rlsv3.RateLimitRequest, error) {
	var c Codec
	m := &rlsv3.RateLimitRequest{}
	in := append([]byte(nil), b...)
	err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(in)}, m)
	for i := range in { // gRPC reuses the buffer: nothing decoded may share it
		in[i] = 0xff
	}
	return m, err
}

func TestPlainRequestsDecodeByHandAsProtoDoes(t *testing.T) {
	for i, want := range requests() {
		b, err := proto.Marshal(want)
		require.NoError(t, err)
		m := &rlsv3.RateLimitRequest{}
		require.True(t, decodeRequest(b, m), "request %d is of the plain shape", i)
		require.True(t, proto.Equal(want, m), "request %d: %v, want %v", i, m, want)
		got, err := decodeByCodec(b)
		require.NoError(t, err)
		require.True(t, proto.Equal(want, got), "request %d through the codec", i)
	}
}

// Every request outside the plain shape goes to proto, which decodes it,
// or refuses it, as gRPC's own codec does.
func TestOtherRequestsAreProtos(t *testing.T) {
	plain, err := proto.Marshal(requests()[3])
	require.NoError(t, err)
	desc := func(inner []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), inner)
	}
	override := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5))
	cases := map[string][]byte{
		"an unknown field":                  protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), plain...), 9, protowire.VarintType), 1),
		"invalid UTF-8 in the domain":       protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0xff, 'a'}),
		"invalid UTF-8 in a value":          desc(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte{0xc3}))),
		"a limit given twice (merged)":      desc(append(append([]byte(nil), override...), override...)),
		"hits_addend past uint32":           protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 1<<32),
		"the domain as a varint":            protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 3),
		"a truncated descriptor":            plain[:len(plain)-1],
		"a unit past int32":                 desc(protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 1<<40))),
		"field number 0":                    {0x02, 0x00},
		"an unknown field in an entry":      desc(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), protowire.AppendVarint(protowire.AppendTag(nil, 4, protowire.VarintType), 1))),
		"a group":                           protowire.AppendTag(protowire.AppendTag(nil, 2, protowire.StartGroupType), 2, protowire.EndGroupType),
		"hits_addend given twice (merged)":  desc(append(protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), nil), protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), []byte{8, 1})...)),
		"the domain given twice (last one)": protowire.AppendString(protowire.AppendTag(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "a"), 1, protowire.BytesType), "b"),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			want, wantErr := decodeByProto(b)
			got, err := decodeByCodec(b)
			require.Equal(t, wantErr != nil, err != nil, "error %v, proto's %v", err, wantErr)
			if err == nil {
				require.True(t, proto.Equal(want, got), "%v, want %v", got, want)
			}
		})
	}
}

// FuzzRequestDecoding holds the codec to proto's decoding on any bytes:
// the same message, or an error where proto has one.
func FuzzRequestDecoding(f *testing.F) {
	for _, r := range requests() {
		b, err := proto.Marshal(r)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x01, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		want, wantErr := decodeByProto(b)
		got, err := decodeByCodec(b)
		require.Equal(t, wantErr != nil, err != nil, "error %v, proto's %v", err, wantErr)
		if err == nil {
			require.True(t, proto.Equal(want, got), "%v, want %v", got, want)
		}
	})
}

// responses are responses as the RLS writes them, and some it does not.
func responses() []*rlsv3.RateLimitResponse {
	limit := &rlsv3.RateLimitResponse_RateLimit{Name: "per user", RequestsPerUnit: 10, Unit: rlsv3.RateLimitResponse_RateLimit_HOUR}
	return []*rlsv3.RateLimitResponse{
		{},
		{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OK}}},
		{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			{Code: rlsv3.RateLimitResponse_OVER_LIMIT, CurrentLimit: limit, DurationUntilReset: &durationpb.Duration{Seconds: 3599, Nanos: 999_000_000}},
			{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: limit, LimitRemaining: 1<<32 - 1, DurationUntilReset: &durationpb.Duration{}},
			{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Unit: -1}, DurationUntilReset: &durationpb.Duration{Seconds: -1, Nanos: -5}},
			{LimitRemaining: 3, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: "ü€"}},
		}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: 1}},
			ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "RateLimit-Limit", Value: "10"}, {Key: "x", RawValue: []byte{0, 0xff}}, {}},
			RequestHeadersToAdd:  []*corev3.HeaderValue{{Key: "x-ratelimit", Value: strings.Repeat("v", 2000)}}},
		// Not the plain shape: proto's.
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Quota: &rlsv3.RateLimitResponse_Quota{Requests: 3}}}},
		{DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewStringValue("b")}}},
		{RawBody: []byte("over")},
		{Quota: &rlsv3.RateLimitResponse_Quota{Requests: 1}},
	}
}

func TestResponsesEncodeAsProtoDoes(t *testing.T) {
	var c Codec
	for i, m := range responses() {
		want, err := proto.Marshal(m)
		require.NoError(t, err)
		if i < 4 {
			size, _, ok := responseSize(m, nil)
			require.True(t, ok, "response %d is of the plain shape", i)
			require.Equal(t, len(want), size)
		}
		got, err := c.Marshal(m)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got.Materialize()), "response %d", i)
		got.Free()
	}
}

// A response proto refuses (a nil status, invalid UTF-8) is refused as
// proto refuses it.
func TestBadResponsesAreRefusedAsProtoRefuses(t *testing.T) {
	var c Codec
	for _, m := range []*rlsv3.RateLimitResponse{
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: "\xff"}}}},
		{ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "\xc3"}}},
	} {
		_, want := proto.Marshal(m)
		_, err := c.Marshal(m)
		require.Error(t, want)
		require.Error(t, err)
	}
}

// FuzzResponseEncoding holds the codec to proto's bytes for responses
// built from any numbers and strings.
func FuzzResponseEncoding(f *testing.F) {
	f.Add(int32(1), uint32(10), "per user", int32(3), uint32(9), int64(59), int32(5), "k", "v", []byte("r"), uint8(2))
	f.Fuzz(func(t *testing.T, code int32, rpu uint32, name string, unit int32, remaining uint32, secs int64, nanos int32, key, value string, raw []byte, n uint8) {
		m := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_Code(code)}
		for i := range int(n % 5) {
			st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_Code(code + int32(i)), LimitRemaining: remaining >> i}
			if i%2 == 0 {
				st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: rpu, Unit: rlsv3.RateLimitResponse_RateLimit_Unit(unit)}
			}
			if i != 1 {
				st.DurationUntilReset = &durationpb.Duration{Seconds: secs, Nanos: nanos}
			}
			m.Statuses = append(m.Statuses, st)
			m.ResponseHeadersToAdd = append(m.ResponseHeadersToAdd, &corev3.HeaderValue{Key: key, Value: value, RawValue: raw})
		}
		var c Codec
		want, wantErr := proto.Marshal(m)
		got, err := c.Marshal(m)
		require.Equal(t, wantErr != nil, err != nil, "error %v, proto's %v", err, wantErr)
		if err == nil {
			require.Equal(t, string(want), string(got.Materialize()))
		}
	})
}
