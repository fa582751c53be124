package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// processCPU is the CPU time (user and system) process pid has used, from
// /proc/<pid>/stat (in USER_HZ ticks: 100 a second on Linux).
func processCPU(t *testing.T, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	require.NoError(t, err)
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	require.NoError(t, err)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// The Rate Limit Quota Service beside RLS on one load: one ratelimitd (its
// defaults, near cache on) on one Redis, a rule of 1,000 a second, 20
// planes' demand of about 5x it. Under RLQS the planes report every second
// (Envoy's reporting intervals are seconds); under RLS each request is a
// call. Once the first assignments are out, the service's calls per admitted
// request are 100x fewer at least under RLQS, and its CPU per admitted
// request 10x less at least (each measured in the same run; the figures
// are logged).
func TestRLQSCostsLessThanRLSPerAdmittedRequest(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc: the service's CPU cannot be read here")
	}
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "fleet.yaml"), fleetRules)
	srv := testserver.Own(t, testserver.Redis)
	const planes, interval, run = 20, time.Second, 6 * time.Second
	d := start(t, "-config", cfg, "-store", "redis://"+srv.Addr, "-rlqs-ttl", "1500ms")
	pid := d.cmd.Process.Pid
	rng := rand.New(rand.NewPCG(13, 14))
	demands := make([]float64, planes)
	total := 0.0
	for i := range demands {
		demands[i] = rng.ExpFloat64() * 250
		total += demands[i]
	}
	demands[0] += 3000
	total += 3000

	// RLQS.
	ctx, cancel := context.WithCancel(context.Background())
	fleet := make([]*livePlane, planes)
	for i := range fleet {
		s, err := rlqsv3.NewRateLimitQuotaServiceClient(d.conn).StreamRateLimitQuotas(ctx)
		require.NoError(t, err)
		fleet[i] = newLivePlane(s, demands[i])
	}
	var reports, admitted atomic.Int64
	wait := runFleet(ctx, fleet, interval, func(int) rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient { return nil },
		func(_ int, _ time.Time, in []time.Time, _, sent int) {
			reports.Add(int64(sent))
			admitted.Add(int64(len(in)))
		})
	time.Sleep(3 * interval) // the first assignments, and shares settled: counted from here
	cpu, reports0, admitted0 := processCPU(t, pid), reports.Load(), admitted.Load()
	time.Sleep(run)
	rlqsCPU := processCPU(t, pid) - cpu
	cancel()
	require.NoError(t, wait())
	reports.Add(-reports0)
	admitted.Add(-admitted0)
	require.Positive(t, admitted.Load())

	// RLS: every request of the same load is a call (Envoy asks once a
	// request), and the rule admits at most its limit a second, so RLS's
	// calls per admitted request are the load over the limit at the least,
	// and its CPU per admitted request that many calls' CPU, each measured
	// here: 32 callers as fast as they go for 2s. (Measured as calls per
	// OK answer instead, a machine too slow to offer the load made RLS look
	// cheaper than it is: 1.6 calls per admitted request beside busy loops
	// under -race.)
	const limit, rlsRun = 1000, 2 * time.Second
	var calls, ok atomic.Int64
	cpu = processCPU(t, pid)
	began := time.Now()
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(began) < rlsRun {
				res, err := d.ask(context.Background(), "fleet", []string{"tenant", "acme"})
				calls.Add(1)
				if err == nil && res.GetOverallCode() == rlsv3.RateLimitResponse_OK {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	rlsCPU := processCPU(t, pid) - cpu
	require.Positive(t, ok.Load())
	perCall := rlsCPU / time.Duration(calls.Load())

	rlqsCalls, rlsCalls := float64(reports.Load())/float64(admitted.Load()), total/limit
	rlqsCost, rlsCost := rlqsCPU/time.Duration(admitted.Load()), time.Duration(float64(perCall)*rlsCalls)
	t.Logf("RLS: %.0f calls/s offered by the test, %.0f admitted a second; %v of CPU a call", float64(calls.Load())/elapsed.Seconds(), float64(ok.Load())/elapsed.Seconds(), perCall)
	t.Logf("calls per admitted request: RLQS %.4f, RLS %.2f (%.0fx fewer); service CPU per admitted request: RLQS %v, RLS %v (%.0fx less)",
		rlqsCalls, rlsCalls, rlsCalls/rlqsCalls, rlqsCost, rlsCost, float64(rlsCost)/float64(max(rlqsCost, 1)))
	require.GreaterOrEqual(t, rlsCalls/rlqsCalls, 100.0)
	require.GreaterOrEqual(t, rlsCost, 10*rlqsCost)
}
