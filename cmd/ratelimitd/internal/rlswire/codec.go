// Package rlswire is ratelimitd's gRPC codec: Envoy's rate limit request
// decoded, and its response encoded, without protobuf's reflection, every
// other message (and any of these of an unusual shape) by gRPC's own proto
// codec.
//
// A request and its response are small messages the service handles on
// every call: with the near cache answering, proto.Unmarshal and
// proto.Marshal were an eighth of the service's CPU at three descriptors a
// request (docs/figures.md). The messages this package writes and reads are
// exactly proto's: it takes a message only in the plain shape it knows,
// field by field, and hands anything else to proto, and wire_test.go holds
// it to proto's bytes and messages on any input. envoyproxy/go-control-plane
// ships vtprotobuf marshalers for these messages, but only behind a build
// tag every build would have to carry, and no unmarshaler.
package rlswire

import (
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Codec is the codec to serve with (grpc.ForceServerCodecV2): named
// "proto", as the one it stands in for. The zero value is ready.
type Codec struct{}

// protoCodec is gRPC's, registered by its package's init, which runs
// before this package's.
var protoCodec = encoding.GetCodecV2(proto.Name)

// Name implements encoding.CodecV2.
func (Codec) Name() string { return proto.Name }

// Marshal implements encoding.CodecV2: a RateLimitResponse of the plain
// shape by hand, anything else by proto.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*rlsv3.RateLimitResponse); ok && m != nil {
		if out, ok := encode(m); ok {
			return out, nil
		}
	}
	return protoCodec.Marshal(v)
}

// encode writes m if it has the plain shape, into a buffer of gRPC's pool
// when it is large enough to be pooled (as gRPC's codec does). A panic
// (none is known: the fuzz tests hold it to proto on any message) hands m
// to proto rather than reach gRPC's caller.
func encode(m *rlsv3.RateLimitResponse) (out mem.BufferSlice, ok bool) {
	defer func() {
		if recover() != nil {
			out, ok = nil, false
		}
	}()
	var scratch [32]int // the sizes of 16 statuses with limits, without allocating
	size, sz, ok := responseSize(m, scratch[:0])
	if !ok {
		return nil, false
	}
	if mem.IsBelowBufferPoolingThreshold(size) {
		return mem.BufferSlice{mem.SliceBuffer(appendResponse(make([]byte, 0, size), m, sz))}, true
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	*buf = appendResponse((*buf)[:0], m, sz)
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, true
}

// Unmarshal implements encoding.CodecV2: a RateLimitRequest of the plain
// shape by hand, anything else by proto.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(*rlsv3.RateLimitRequest); ok && m != nil && decode(data, m) {
		return nil
	}
	return protoCodec.Unmarshal(data, v)
}

// decode reads data into m if it has the plain shape; a panic leaves m to
// proto, as encode's does.
func decode(data mem.BufferSlice, m *rlsv3.RateLimitRequest) (ok bool) {
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	defer func() {
		if recover() != nil {
			m.Reset()
			ok = false
		}
	}()
	m.Reset()
	return decodeRequest(buf.ReadOnlyData(), m)
}
