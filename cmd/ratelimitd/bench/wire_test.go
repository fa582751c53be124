package main

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// The load reads a response's overall code whatever else it holds, in one
// buffer or several, and refuses a message cut short.
func TestTheLoadReadsAResponsesOverallCode(t *testing.T) {
	for _, code := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		b, err := proto.Marshal(&rlsv3.RateLimitResponse{
			Statuses:             []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OVER_LIMIT, LimitRemaining: 7}},
			ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "x-ratelimit-limit", Value: "10"}},
			OverallCode:          code,
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, data := range []mem.BufferSlice{{mem.SliceBuffer(b)}, {mem.SliceBuffer(b[:3]), mem.SliceBuffer(b[3:])}} {
			var o overall
			if err := (loadCodec{}).Unmarshal(data, &o); err != nil {
				t.Fatalf("%v in %d buffers: %v", code, len(data), err)
			}
			if o.code != code {
				t.Fatalf("read %v, want %v (%d buffers)", o.code, code, len(data))
			}
		}
		var o overall
		if err := (loadCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(b[:len(b)-1])}, &o); err == nil {
			t.Fatalf("%v: a response cut short read as %v", code, o.code)
		}
	}
	var none overall
	if err := (loadCodec{}).Unmarshal(nil, &none); err != nil || none.code != rlsv3.RateLimitResponse_UNKNOWN {
		t.Fatalf("an empty response: %v, %v; want UNKNOWN", none.code, err)
	}
}

// What the load sends is the request proto would encode.
func TestTheLoadSendsTheRequestsBytes(t *testing.T) {
	req := &rlsv3.RateLimitRequest{Domain: "bench"}
	e, err := encode(req)
	if err != nil {
		t.Fatal(err)
	}
	data, err := loadCodec{}.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var got rlsv3.RateLimitRequest
	if err := proto.Unmarshal(data.Materialize(), &got); err != nil || !proto.Equal(&got, req) {
		t.Fatalf("sent %v (%v), want %v", &got, err, req)
	}
	if _, err := (loadCodec{}).Marshal(req); err == nil {
		t.Fatal("a message not encoded was sent")
	}
}
