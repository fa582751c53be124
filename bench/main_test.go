package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/servertest/serverinfo"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

func TestOverAdmissionsCountsWindowsOverTheLimit(t *testing.T) {
	const limit, window = 2, 1000
	at := func(key int32, times ...int64) []admission {
		var a []admission
		for _, t := range times {
			a = append(a, admission{key, t})
		}
		return a
	}
	for _, tc := range []struct {
		name    string
		all     []admission
		alg     ratelimit.Algorithm
		wantOut int64
	}{
		{"sliding: two per window", at(0, 0, 500, 1000, 1500, 2000), ratelimit.SlidingWindow, 0},
		{"sliding: three within 999µs", at(0, 0, 500, 999), ratelimit.SlidingWindow, 1},
		{"sliding: a window is per key", append(at(0, 0, 1), at(1, 2, 3)...), ratelimit.SlidingWindow, 0},
		{"sliding: the boundary burst", at(0, 900, 950, 1000, 1050), ratelimit.SlidingWindow, 2},
		{"fixed: the boundary burst is allowed", at(0, 900, 950, 1000, 1050), ratelimit.FixedWindow, 0},
		{"fixed: three in one aligned window", at(0, 1000, 1500, 1999), ratelimit.FixedWindow, 1},
	} {
		require.Equal(t, tc.wantOut, overAdmissions(tc.all, 2, ratelimit.NewPolicy(tc.alg, limit, time.Duration(window)*time.Microsecond)), tc.name)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	require.InDelta(t, 500, h.quantile(0.5), 500*0.04, "p50 within the 3% buckets")
	require.InDelta(t, 990, h.quantile(0.99), 990*0.04)
	require.Zero(t, (&histogram{}).quantile(0.5))
}

func TestFlagsAreValidated(t *testing.T) {
	for _, args := range [][]string{{"-backend", "mysql"}, {"-algorithm", "token"}, {"-limit", "-1"}, {"-window", "10us"}, {"-concurrency", "0"}} {
		_, err := parseFlags(args)
		require.Error(t, err, args)
	}
	cfg, err := parseFlags(nil)
	require.NoError(t, err)
	require.Equal(t, []string{"memory"}, cfg.backends)
	require.Equal(t, 64, cfg.concurrency)
}

// A short run on the memory store prints one JSON line per algorithm with
// every field, admits within the policy, and writes the plot.
func TestShortRunOnTheMemoryStore(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "burst.svg")
	cfg, err := parseFlags([]string{"-duration", "300ms", "-concurrency", "8", "-keys", "50", "-limit", "10", "-window", "100ms", "-timeout", "10s", "-json", "-plot", plot})
	require.NoError(t, err)
	var out, progress bytes.Buffer
	require.NoError(t, run(cfg, &out, &progress))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, len(backend.Algorithms()), "a row per algorithm")
	for i, line := range lines {
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &r))
		require.Equal(t, backend.Algorithms()[i].String(), r["algorithm"])
		for _, field := range []string{"backend", "algorithm", "concurrency", "ops_per_sec", "p50_us", "p99_us", "allocs_per_op",
			"roundtrips_per_decision", "bytes_per_key", "decisions", "allowed", "limit", "denied_share", "over_admissions"} {
			require.Contains(t, r, field)
		}
		require.Equal(t, "memory", r["backend"])
		require.Equal(t, "-", r["roundtrips_per_decision"])
		require.Zero(t, r["over_admissions"])
		require.Positive(t, r["allowed"])
		require.LessOrEqual(t, r["allowed"], float64(50*10*(3+2)*2), "within what the policy can admit in 300ms")
	}
	svg, err := os.ReadFile(plot)
	require.NoError(t, err)
	require.Contains(t, string(svg), "fixed window: 20 admitted across the boundary")
}

// Round trips are what clients send: every command a script calls on the
// server is read from the scripts themselves (a ZRANGE the sliding log
// learned once counted as 0.2 round trips a decision), and the script
// calls themselves are not excluded.
func TestRoundTripsLeaveOutTheScriptsOwnCommands(t *testing.T) {
	for _, cmd := range []string{"zrange", "zcard", "get", "set", "zadd", "time", "pexpire", "function|load"} {
		require.True(t, serverinfo.NotClientCommand(cmd), cmd)
	}
	for _, cmd := range []string{"fcall", "evalsha", "eval", "evalsha_ro", "script", "del"} {
		require.False(t, serverinfo.NotClientCommand(cmd), cmd)
	}
	before := map[string]serverinfo.Stat{"evalsha": {Calls: 10}, "zrange": {Calls: 3}}
	after := map[string]serverinfo.Stat{"evalsha": {Calls: 15}, "eval": {Calls: 1}, "zrange": {Calls: 9}, "cluster|slots": {Calls: 2}}
	require.Equal(t, int64(6), serverinfo.ClientCommands(before, after))
	// An EVALSHA answered NOSCRIPT is no decision's: the EVAL after it is.
	after["evalsha"] = serverinfo.Stat{Calls: 23, Failed: 8}
	after["eval"] = serverinfo.Stat{Calls: 9}
	require.Equal(t, int64(5+9), serverinfo.ClientCommands(before, after))
}

// A short run on a real server: round trips are measured on the server and
// come to one per decision, a key's bytes are read with MEMORY USAGE, and
// redis-benchmark (when on PATH, as in CI) adds its reference rows.
func TestShortRunOnAServer(t *testing.T) {
	addr := testserver.Get(t, testserver.Redis).Addr
	_, benchErr := exec.LookPath("redis-benchmark")
	for _, name := range []string{"redis", "valkey"} {
		t.Run(name, func(t *testing.T) {
			alg := "sliding"
			if name == "valkey" {
				alg = "fixed" // one packed key: its bytes, one round trip a decision
			}
			cfg, err := parseFlags([]string{"-backend", name, "-addr", addr, "-algorithm", alg, "-duration", "300ms",
				"-concurrency", "8", "-keys", "50", "-limit", "10", "-window", "100ms", "-timeout", "10s", "-json"})
			require.NoError(t, err)
			var out, progress bytes.Buffer
			require.NoError(t, run(cfg, &out, &progress), progress.String())
			var rows []result
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				var r result
				require.NoError(t, json.Unmarshal([]byte(line), &r))
				rows = append(rows, r)
			}
			r := rows[0]
			require.Equal(t, name, r.Backend)
			require.Positive(t, r.Decisions)
			require.Zero(t, r.OverAdmissions)
			require.Zero(t, r.Errors)
			trips, ok := r.RoundtripsPerDecision.(float64)
			require.True(t, ok, "round trips are a number on a server: %v", r.RoundtripsPerDecision)
			t.Logf("%d decisions, %v round trips each, %d B per key", r.Decisions, trips, r.BytesPerKey)
			require.InDelta(t, 1, trips, 0.05, "one command per decision, counted by the server (%d decisions)", r.Decisions)
			require.Positive(t, r.ServerUsPerDecision, "the server's time in the scripts, per decision")
			require.Positive(t, r.ServerCPUUsPerDecision, "the masters' CPU per decision")
			t.Logf("server time per decision: %.1fµs", r.ServerUsPerDecision)
			if alg == "sliding" {
				require.Greater(t, r.BytesPerKey, int64(100), "MEMORY USAGE of a key holding 10 entries")
				require.Less(t, r.BytesPerKey, int64(1500))
			} else {
				require.Positive(t, r.BytesPerKey, "MEMORY USAGE of the fixed window's key")
				require.Less(t, r.BytesPerKey, int64(200), "one packed string")
			}
			if benchErr == nil {
				require.Greater(t, len(rows), 1, "redis-benchmark's reference rows: %s", progress.String())
				for _, ref := range rows[1:] {
					require.True(t, strings.HasPrefix(ref.Backend, "redis-benchmark -c 8 -P "), ref.Backend)
					require.Len(t, ref.OpsPerSecRuns, referenceRuns, "repeated runs")
					require.Equal(t, slices.Sorted(slices.Values(ref.OpsPerSecRuns))[referenceRuns/2], ref.OpsPerSec, "their median")
				}
			}
		})
	}
}

// At a fixed limit of 100 per second, a server's rows admitted every
// decision (no key reached its limit at server speed), so their "0
// over-admissions" tested nothing. By default the limit is now picked per
// backend so that about half the decisions are denials (nearly all on the
// memory store, whose limit is capped at maxAutoLimit).
func TestTheDefaultLimitDeniesARealShare(t *testing.T) {
	addr := testserver.Get(t, testserver.Redis).Addr
	for _, name := range []string{"memory", "redis"} {
		cfg, err := parseFlags([]string{"-backend", name, "-addr", addr, "-algorithm", "sliding", "-duration", "500ms",
			"-concurrency", "8", "-keys", "50", "-window", "100ms", "-timeout", "10s", "-json"})
		require.NoError(t, err)
		if name == "memory" {
			cfg.addr = ""
		}
		var out, progress bytes.Buffer
		require.NoError(t, run(cfg, &out, &progress), progress.String())
		var r result
		require.NoError(t, json.Unmarshal([]byte(strings.SplitN(out.String(), "\n", 2)[0]), &r))
		t.Logf("%s: limit %d, %d decisions, %.1f%% denied", name, r.Limit, r.Decisions, 100*r.DeniedShare)
		require.Zero(t, r.OverAdmissions)
		require.Zero(t, r.Errors)
		require.True(t, r.Limit >= 1 && r.Limit <= maxAutoLimit, "limit %d", r.Limit)
		require.GreaterOrEqual(t, r.DeniedShare, 0.05, "a real share denied")
		require.Positive(t, r.Allowed, "and some admitted")
		if r.Limit < maxAutoLimit { // the memory store, too fast for a limit of 100, denies nearly all
			require.LessOrEqual(t, r.DeniedShare, 0.95, "a real share admitted")
		}
		require.Equal(t, r.Decisions-r.Allowed, int64(math.Round(r.DeniedShare*float64(r.Decisions))))
	}
}

// A short fault run: the three phases, plain and guarded, with the time
// budget on every row; the guarded outage is answered by the fallback, the
// plain one fails; decisions come back to the server after it returns.
func TestShortFaultRun(t *testing.T) {
	testserver.Get(t, testserver.Redis) // a server binary is on PATH, or the test skips (fails under CI)
	cfg, err := parseFlags([]string{"-backend", "redis", "-fault", "stall", "-duration", "1s", "-concurrency", "8", "-json"})
	require.NoError(t, err)
	var out, progress bytes.Buffer
	require.NoError(t, run(cfg, &out, &progress), progress.String())
	var rows []phaseResult
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r phaseResult
		require.NoError(t, json.Unmarshal([]byte(line), &r))
		rows = append(rows, r)
	}
	require.Len(t, rows, 6, "before, outage, after; plain and guard")
	for i, r := range rows {
		require.Equal(t, []string{"plain", "guard"}[i/3], r.Mode)
		require.Equal(t, []string{"before", "outage", "after"}[i%3], r.Phase)
		require.Equal(t, ratelimit.DefaultTimeout.Microseconds(), r.TimeoutUs)
		require.Positive(t, r.OpsPerSec, "%s %s", r.Mode, r.Phase)
		require.Equal(t, r.Phase == "after", r.RecoveryMs != nil, "%s %s: recovery_ms only after", r.Mode, r.Phase)
	}
	require.Positive(t, rows[1].Errors, "plain, outage: failing closed")
	require.Zero(t, rows[1].Store+rows[1].Fallback)
	require.Positive(t, rows[4].Fallback, "guard, outage: the fallback answers")
	require.Zero(t, rows[4].Store+rows[4].Errors)
	require.Positive(t, rows[5].Store, "guard, after: the server decides again")

	_, err = parseFlags([]string{"-backend", "memory", "-fault", "stall"})
	require.Error(t, err, "-fault needs a server")
	_, err = parseFlags([]string{"-backend", "redis", "-fault", "stall", "-addr", "127.0.0.1:6379"})
	require.Error(t, err, "-fault needs a throwaway server")
	_, err = parseFlags([]string{"-backend", "redis", "-fault", "flood"})
	require.Error(t, err)
}

// -addr with the nodes of a cluster: a short run of every algorithm through
// each client, with round trips counted over the masters and a key's bytes
// read from its own node (-addr with one node once got MOVED on 77% of
// decisions, and valkey's memory probe aborted).
func TestShortRunOnACluster(t *testing.T) {
	c := testserver.GetCluster(t, testserver.RedisCluster)
	for _, name := range []string{"redis", "valkey"} {
		t.Run(name, func(t *testing.T) {
			cfg, err := parseFlags([]string{"-backend", name, "-addr", strings.Join(c.Addrs, ","), "-duration", "200ms",
				"-concurrency", "8", "-keys", "50", "-limit", "10", "-window", "100ms", "-timeout", "10s", "-json"})
			require.NoError(t, err)
			var out, progress bytes.Buffer
			require.NoError(t, run(cfg, &out, &progress), progress.String())
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				var r result
				require.NoError(t, json.Unmarshal([]byte(line), &r))
				if r.Backend != name {
					continue // a reference row
				}
				require.Zero(t, r.Errors, r.Algorithm)
				require.Zero(t, r.OverAdmissions, r.Algorithm)
				require.InDelta(t, 1, r.RoundtripsPerDecision, 0.05, "%s: one command per decision, summed over the masters", r.Algorithm)
				require.Positive(t, r.BytesPerKey, r.Algorithm)
			}
		})
	}
}

// -abusive sends most requests to one denied key; -nearcache adds rows with
// a nearcache, which answers most of them without the server.
func TestAnAbusiveKeyWithAndWithoutANearcache(t *testing.T) {
	addr := testserver.Get(t, testserver.Redis).Addr
	cfg, err := parseFlags([]string{"-backend", "redis", "-addr", addr, "-algorithm", "fixed", "-duration", "300ms",
		"-concurrency", "8", "-keys", "50", "-limit", "10", "-window", "1m", "-abusive", "0.9", "-nearcache", "-timeout", "10s", "-json"})
	require.NoError(t, err)
	var out, progress bytes.Buffer
	require.NoError(t, run(cfg, &out, &progress), progress.String())
	trips := map[string]float64{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r result
		require.NoError(t, json.Unmarshal([]byte(line), &r))
		if v, ok := r.RoundtripsPerDecision.(float64); ok && !strings.HasPrefix(r.Backend, "redis-benchmark") {
			trips[r.Backend] = v
			require.Zero(t, r.OverAdmissions, r.Backend)
		}
	}
	require.InDelta(t, 1, trips["redis"], 0.05, "every decision is a round trip")
	require.Less(t, trips["redis+nearcache"], 0.3, "the abusive key's denials are answered locally")
	t.Logf("round trips per decision: %v", trips)
	_, err = parseFlags([]string{"-abusive", "1.5"})
	require.Error(t, err)
}

// Progress goes to its writer one line per step when that is no terminal (a
// log file once got a carriage return a second), and the report to stdout.
func TestProgressIsOneLinePerStepOffATerminal(t *testing.T) {
	cfg, err := parseFlags([]string{"-duration", "100ms", "-algorithm", "fixed", "-keys", "10"})
	require.NoError(t, err)
	var out, progress bytes.Buffer
	require.NoError(t, run(cfg, &out, &progress))
	require.NotContains(t, progress.String(), "\r")
	require.Equal(t, "picking a limit for memory fixed: 100ms at 100 per 1s\nrunning memory fixed for 100ms\n", progress.String())
	require.Contains(t, out.String(), "memory")
	require.NotContains(t, out.String(), "running")
}

// The bench once compiled the Docker client (49 packages, through the test
// server starter) on every first run: it must link none of it.
func TestTheBenchLinksNoDockerClient(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, string(out))
	for _, pkg := range strings.Split(string(out), "\n") {
		for _, heavy := range []string{"docker", "containerd", "opencontainers", "prometheus", "google.golang.org/grpc"} {
			require.NotContains(t, pkg, heavy, "the bench links %s", pkg)
		}
	}
}

// A run that made no decision (a loaded machine once spent a 200ms run in
// its GC and its first call) says so and fails: its table once printed
// +Inf and NaN and still said "correct: yes".
func TestARunWithNoDecisionSaysSo(t *testing.T) {
	cfg, err := parseFlags([]string{"-backend", "memory", "-algorithm", "fixed", "-duration", "1ns", "-limit", "10", "-json"})
	require.NoError(t, err)
	var out, progress bytes.Buffer
	err = run(cfg, &out, &progress)
	require.ErrorContains(t, err, "no decision was made")
	require.NotContains(t, out.String(), "Inf")
	require.NotContains(t, out.String(), "NaN")
}

// -policies 3: three limits on three keys of one server per request,
// through Multi: one script a request (a decision is a request), exact.
// Multi once peeked and took policy by policy: 4.8 scripts a request.
func TestAShortRunOfThreePoliciesARequest(t *testing.T) {
	addr := testserver.Get(t, testserver.Redis).Addr
	cfg, err := parseFlags([]string{"-backend", "redis", "-addr", addr, "-algorithm", "sliding", "-duration", "300ms",
		"-concurrency", "8", "-keys", "50", "-limit", "10", "-window", "100ms", "-timeout", "10s", "-json", "-policies", "3"})
	require.NoError(t, err)
	var out, progress bytes.Buffer
	require.NoError(t, run(cfg, &out, &progress), progress.String())
	var r result
	require.NoError(t, json.NewDecoder(&out).Decode(&r))
	require.Equal(t, 3, r.Policies)
	require.Positive(t, r.Decisions)
	require.Zero(t, r.OverAdmissions)
	require.Zero(t, r.Errors)
	require.InDelta(t, 1, r.RoundtripsPerDecision, 0.05, "one script a request, whatever the policies (%d requests)", r.Decisions)
	_, err = parseFlags([]string{"-policies", "0"})
	require.Error(t, err)
}
