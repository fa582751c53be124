package rlswire

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	protov2 "google.golang.org/protobuf/proto"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// BenchmarkCodec is a request of three descriptors decoded and its
// response encoded, by this codec and by gRPC's (docs/figures.md).
func BenchmarkCodec(b *testing.B) {
	req, err := protov2.Marshal(requests()[3])
	require.NoError(b, err)
	res := responses()[2]
	var ours Codec
	for name, c := range map[string]encoding.CodecV2{"rlswire": ours, "grpc-proto": encoding.GetCodecV2(proto.Name)} {
		b.Run(name+"/request", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(req)}, &rlsv3.RateLimitRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/response", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				out, err := c.Marshal(res)
				if err != nil {
					b.Fatal(err)
				}
				out.Free()
			}
		})
	}
}
