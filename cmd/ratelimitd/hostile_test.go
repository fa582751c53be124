package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// Two instances on one Redis, each under the hostile clients of the
// probes that found them (a connection flooding streams, 2,000 HTTP
// connections that never finish a request, clients sending 4 KB values):
// both answer every health probe within 1 s, and ordinary decisions
// within three times their p99 before the attack (plus the scheduling
// noise this process measured meanwhile).
func TestTwoInstancesStayServedUnderHostileClients(t *testing.T) {
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "limits.yaml"), `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000}
`)
	store := "redis://" + testserver.Get(t, testserver.Redis).Addr
	daemons := []*daemon{start(t, "-config", cfg, "-store", store), start(t, "-config", cfg, "-store", store)}
	ordinary := func() time.Duration { // the p99 of 300 ordinary decisions, over both instances
		var took []time.Duration
		for i := 0; i < 300; i++ {
			d := daemons[i%2]
			began := time.Now()
			_, err := d.ask(context.Background(), "api", []string{"user", fmt.Sprint("ordinary-", i%10)})
			took = append(took, time.Since(began))
			require.NoError(t, err)
		}
		slices.Sort(took)
		return took[len(took)*99/100]
	}
	before := ordinary()

	noise := testserver.StartNoise()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var long atomic.Int64
	for _, d := range daemons {
		floodStreams(t, d.grpc, 20_000, false)
		for i := 0; i < 2000; i++ {
			c, err := net.Dial("tcp", d.http)
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			_, _ = c.Write([]byte("POST /v1/allow HTTP/1.1\r\nHost: x\r\n")) // never finished
		}
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				value := strings.Repeat("v", 4000)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					in := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{
						{Key: "user", Value: fmt.Sprint(g, "-", i, value)}}}}}
					if _, err := d.client.ShouldRateLimit(context.Background(), in); err == nil {
						long.Add(1)
					}
					time.Sleep(time.Millisecond)
				}
			}()
		}
	}
	probe := &http.Client{Timeout: time.Second}
	for _, d := range daemons {
		for i := 0; i < 18; i++ {
			resp, err := probe.Get("http://" + d.admin + "/healthz")
			require.NoError(t, err, "probe %d within 1 s", i)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
		}
	}
	during := ordinary()
	close(stop)
	wg.Wait()
	late := noise.Stop()
	t.Logf("ordinary decisions' p99: %v before, %v under attack (scheduling noise %v); %d requests of 4 KB values answered", before, during, late, long.Load())
	assert.LessOrEqual(t, during, 3*before+late, "ordinary decisions under attack, against their p99 before")
	for _, d := range daemons {
		// A goroutine a connection -http holds (1024 at most), and the
		// flooding connection's streams (100): bounded.
		assert.Less(t, d.metric(t, "go_goroutines"), 1024+100+300.0, "the held connections and streams are bounded")
	}
}
