package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// echoService answers each request by its one descriptor's value, a
// number n: OVER_LIMIT when n is odd, else OK; Unavailable when n is
// negative; and with n bytes of response headers, so that a large n's
// answer spans several DATA frames.
type echoService struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (echoService) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	n, err := strconv.Atoi(req.Descriptors[0].Entries[0].Value)
	if err != nil || n < 0 {
		return nil, status.Error(codes.Unavailable, "no")
	}
	code := rlsv3.RateLimitResponse_OK
	if n%2 == 1 {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return &rlsv3.RateLimitResponse{OverallCode: code,
		ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "x-pad", Value: strings.Repeat("p", n)}}}, nil
}

// echoConn is a connection of the load's client to echoService, served on
// a loopback port allowing maxStreams streams a connection; stop stops the
// server.
func echoConn(t *testing.T, maxStreams uint32) (c *h2conn, stop func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.MaxConcurrentStreams(maxStreams))
	rlsv3.RegisterRateLimitServiceServer(srv, echoService{})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	if c, err = dialH2(lis.Addr().String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, srv.Stop
}

// message is a request of one descriptor of value v, as the load sends it.
func message(t *testing.T, v int) []byte {
	b, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: strconv.Itoa(v)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return grpcMessage(b)
}

// Many callers on one connection each get their own call's answer, past
// the server's stream limit (more callers than it allows streams) and
// its initial window (far more than 64 KiB sent), with answers in one
// DATA frame or several.
func TestTheH2LoadGetsEachCallsOwnAnswer(t *testing.T) {
	c, _ := echoConn(t, 8)
	const callers, calls = 32, 300
	const big = 40_001                    // a response of three DATA frames or more
	msgs := make([][]byte, callers*calls) // made here: t.Fatal is the test goroutine's
	for v := range msgs {
		msgs[v] = message(t, v)
	}
	bigMsg := message(t, big)
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := newCall()
			for i := range calls {
				v, msg := g*calls+i, msgs[g*calls+i]
				if i%100 == 0 {
					v, msg = big, bigMsg
				}
				code, err := c.call(cl, msg)
				want := rlsv3.RateLimitResponse_OK
				if v%2 == 1 {
					want = rlsv3.RateLimitResponse_OVER_LIMIT
				}
				if err != nil || code != want {
					errs <- fmt.Errorf("value %d: %v, %v; want %v", v, code, err, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A call the server fails is an error, and the connection goes on; a
// server gone fails the calls then, and every later one, and none waits.
func TestTheH2LoadReportsFailures(t *testing.T) {
	c, stop := echoConn(t, 100)
	cl := newCall()
	if _, err := c.call(cl, message(t, -1)); err == nil || !strings.Contains(err.Error(), "grpc-status 14") {
		t.Fatalf("a call answered Unavailable: %v; want grpc-status 14", err)
	}
	if code, err := c.call(cl, message(t, 3)); err != nil || code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the next call: %v, %v; want OVER_LIMIT", code, err)
	}
	stop()
	for i := range 3 {
		if _, err := c.call(cl, message(t, 2)); err == nil {
			t.Fatalf("call %d after the server stopped: no error", i)
		}
	}
}

// A response whose gRPC message is cut short or compressed is refused.
func TestTheH2LoadRefusesAMalformedMessage(t *testing.T) {
	b, err := proto.Marshal(&rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK})
	if err != nil {
		t.Fatal(err)
	}
	msg := grpcMessage(b)
	if code, err := overallCode(msg); err != nil || code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a whole message: %v, %v", code, err)
	}
	compressed := append([]byte{1}, msg[1:]...)
	for name, m := range map[string][]byte{"cut": msg[:len(msg)-1], "compressed": compressed, "empty": nil} {
		if _, err := overallCode(m); err == nil {
			t.Errorf("a %s message read without error", name)
		}
	}
}
