package main

import (
	"fmt"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The load's messages: each request is encoded once, before the clock
// starts, and sent as those bytes; of a response the load reads only its
// overall code. The load's CPU is taken from the cores the services run
// on, and what it spent encoding requests and decoding responses through
// proto's reflection (an eighth of it) only narrowed every ratio. Both
// services are sent the same bytes, and answer as they would Envoy.

// encoded is a request message as sent.
type encoded []byte

// overall is what the load reads of a response.
type overall struct{ code rlsv3.RateLimitResponse_Code }

// loadCodec sends an encoded as is and reads an overall.
type loadCodec struct{}

// loadCall is the option each of the load's calls takes (built once).
var loadCall = []grpc.CallOption{grpc.ForceCodecV2(loadCodec{})}

func (loadCodec) Name() string { return "proto" }

func (loadCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(encoded)
	if !ok {
		return nil, fmt.Errorf("bench: the load sends encoded requests, not %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (loadCodec) Unmarshal(data mem.BufferSlice, v any) error {
	o, ok := v.(*overall)
	if !ok {
		return fmt.Errorf("bench: the load reads overall codes, not %T", v)
	}
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData() // read here, not kept
	} else {
		b = data.Materialize()
	}
	return o.read(b)
}

// read reads o from a RateLimitResponse's bytes.
func (o *overall) read(b []byte) error {
	o.code = rlsv3.RateLimitResponse_UNKNOWN
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("bench: a response: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType { // overall_code
			c, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return fmt.Errorf("bench: a response: %w", protowire.ParseError(n))
			}
			o.code, b = rlsv3.RateLimitResponse_Code(c), b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return fmt.Errorf("bench: a response: %w", protowire.ParseError(n))
		}
		b = b[n:]
	}
	return nil
}

// encode is req as the load sends it.
func encode(req *rlsv3.RateLimitRequest) (encoded, error) {
	return proto.Marshal(req)
}
