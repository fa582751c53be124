package rlswire

import (
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
)

// sizes are the sizes of a response's submessages, in the order
// appendResponse writes them (each status's, then its current limit's, if
// any; each header's), found once by responseSize.
type sizes []int

// responseSize is the size of m on the wire, with sz and its submessages'
// sizes appended, and whether m has the plain shape appendResponse writes:
// the overall code, statuses (code, current limit, remaining, duration
// until reset) and headers to add, with no quota, raw body or dynamic
// metadata, no unknown fields, no nil in a list, and every string valid
// UTF-8. Anything else is proto.Marshal's, so that the bytes are always the
// ones it writes (wire_test.go checks them).
func responseSize(m *rlsv3.RateLimitResponse, sz sizes) (int, sizes, bool) {
	if m.Quota != nil || m.RawBody != nil || m.DynamicMetadata != nil || unknown(m) {
		return 0, nil, false
	}
	n := varintField(int64(m.OverallCode))
	for _, st := range m.Statuses {
		var s int
		var ok bool
		if s, sz, ok = statusSize(st, sz); !ok {
			return 0, nil, false
		}
		n += 1 + protowire.SizeBytes(s)
	}
	for _, hs := range [...][]*corev3.HeaderValue{m.ResponseHeadersToAdd, m.RequestHeadersToAdd} {
		for _, h := range hs {
			if h == nil || unknown(h) || !utf8.ValidString(h.Key) || !utf8.ValidString(h.Value) {
				return 0, nil, false
			}
			s := stringField(h.Key) + stringField(h.Value) + stringField(string(h.RawValue))
			sz = append(sz, s)
			n += 1 + protowire.SizeBytes(s)
		}
	}
	return n, sz, true
}

// statusSize is st's size, and sz with its own and its limit's appended.
func statusSize(st *rlsv3.RateLimitResponse_DescriptorStatus, sz sizes) (int, sizes, bool) {
	if st == nil || st.Quota != nil || unknown(st) {
		return 0, nil, false
	}
	at := len(sz)
	sz = append(sz, 0)
	n := varintField(int64(st.Code)) + varintField(int64(st.LimitRemaining))
	if l := st.CurrentLimit; l != nil {
		if unknown(l) || !utf8.ValidString(l.Name) {
			return 0, nil, false
		}
		s := varintField(int64(l.RequestsPerUnit)) + varintField(int64(l.Unit)) + stringField(l.Name)
		sz = append(sz, s)
		n += 1 + protowire.SizeBytes(s)
	}
	if d := st.DurationUntilReset; d != nil {
		if unknown(d) {
			return 0, nil, false
		}
		n += 1 + protowire.SizeBytes(durationSize(d))
	}
	sz[at] = n
	return n, sz, true
}

func durationSize(d *durationpb.Duration) int {
	return varintField(d.Seconds) + varintField(int64(d.Nanos))
}

// varintField is the size of a field of a number (an enum, an integer)
// with a tag of one byte: none when the number is 0, which proto3 omits.
// A negative number takes ten bytes, as proto writes an int32 or int64.
func varintField(v int64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(uint64(v))
}

// stringField is the size of a field of a string (or bytes) with a tag of
// one byte: none when empty, which proto3 omits.
func stringField(s string) int {
	if s == "" {
		return 0
	}
	return 1 + protowire.SizeBytes(len(s))
}

// unknown reports whether m holds fields it does not know (set by hand,
// or kept from a decoding), which only proto.Marshal writes back.
func unknown(m protoreflect.ProtoMessage) bool {
	return len(m.ProtoReflect().GetUnknown()) > 0
}

// appendResponse appends m, of the plain shape, to b: its fields in their
// numbers' order, as proto writes them; sz are its sizes (responseSize).
func appendResponse(b []byte, m *rlsv3.RateLimitResponse, sz sizes) []byte {
	b = appendVarint(b, 1, int64(m.OverallCode))
	for _, st := range m.Statuses {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sz[0]))
		b, sz = appendStatus(b, st, sz[1:])
	}
	for i, hs := range [...][]*corev3.HeaderValue{m.ResponseHeadersToAdd, m.RequestHeadersToAdd} {
		for _, h := range hs {
			b = protowire.AppendTag(b, protowire.Number(3+i), protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(sz[0]))
			b = appendString(b, 1, h.Key)
			b = appendString(b, 2, h.Value)
			b = appendString(b, 3, string(h.RawValue))
			sz = sz[1:]
		}
	}
	return b
}

// appendStatus appends st; sz start at its limit's size, if it has a limit,
// and what is left of them comes back.
func appendStatus(b []byte, st *rlsv3.RateLimitResponse_DescriptorStatus, sz sizes) ([]byte, sizes) {
	b = appendVarint(b, 1, int64(st.Code))
	if l := st.CurrentLimit; l != nil {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sz[0]))
		b = appendVarint(b, 1, int64(l.RequestsPerUnit))
		b = appendVarint(b, 2, int64(l.Unit))
		b = appendString(b, 3, l.Name)
		sz = sz[1:]
	}
	b = appendVarint(b, 3, int64(st.LimitRemaining))
	if d := st.DurationUntilReset; d != nil {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(durationSize(d)))
		b = appendVarint(b, 1, d.Seconds)
		b = appendVarint(b, 2, int64(d.Nanos))
	}
	return b, sz
}

func appendVarint(b []byte, num protowire.Number, v int64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}
