package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

func TestMain(m *testing.M) { testserver.Main(m) }

// Every contender enforces the limit it is given, so that the ratios
// compare limiters doing the same work: a fresh key admits exactly its
// limit, then nothing more within the window, and keys do not share state.
func TestEveryContenderAdmitsExactlyItsLimit(t *testing.T) {
	srv := testserver.Get(t, testserver.Redis)
	ctx := context.Background()
	makers := append(memoryMakers(), networkMakers(srv.Addr, 4)...)
	for i, m := range makers {
		t.Run(m.name, func(t *testing.T) {
			c, err := m.open(5, time.Hour, fmt.Sprintf("peers:test:%d:%d:", time.Now().UnixNano(), i))
			require.NoError(t, err)
			defer c.close()
			for _, key := range []string{"alice", "bob"} {
				admitted := 0
				for range 8 {
					ok, err := c.allow(ctx, key)
					require.NoError(t, err)
					if ok {
						admitted++
					}
				}
				if m.limitless {
					require.Equal(t, 8, admitted, "%s: a floor that limits nothing", key)
					continue
				}
				require.Equal(t, 5, admitted, key)
			}
		})
	}
}

// A short run of the command on every backend: a row per contender and
// scenario, the reference peer at 1x, no errors, and denying scenarios that
// deny (every key starts at its limit) while admitting ones admit.
func TestARunReportsEveryContenderAgainstItsReference(t *testing.T) {
	srv := testserver.Get(t, testserver.Redis)
	var out, progress bytes.Buffer
	c := config{backend: "all", addr: srv.Addr, duration: 20 * time.Millisecond, rounds: 1, keys: 50, goroutines: 4, json: true}
	require.NoError(t, run(c, &out, &progress))
	perScenario := map[string][]row{}
	dec := json.NewDecoder(&out)
	for dec.More() {
		var r row
		require.NoError(t, dec.Decode(&r))
		perScenario[r.Scenario] = append(perScenario[r.Scenario], r)
	}
	scs := scenarios(c.goroutines)
	require.Len(t, perScenario, len(scs))
	for _, sc := range scs {
		rows := perScenario[sc.name]
		want := len(memoryMakers())
		if sc.network {
			want = len(networkMakers(srv.Addr, 1))
		}
		require.Len(t, rows, want, sc.name)
		seen := map[string]bool{}
		for _, r := range rows {
			require.False(t, seen[r.Contender], "%s: %s reported twice", sc.name, r.Contender)
			seen[r.Contender] = true
			require.Zero(t, r.Errors, "%s: %s", sc.name, r.Contender)
			require.Positive(t, r.NsPerDecision, "%s: %s", sc.name, r.Contender)
			if r.Contender == sc.reference {
				require.InDelta(t, 1, r.VsReference, 1e-9, sc.name)
			}
			switch {
			case sc.network:
			case sc.warm > sc.limit:
				require.Greater(t, r.DeniedShare, 0.9, "%s: %s", sc.name, r.Contender)
			case r.Contender == "sethvargo/go-limiter memorystore":
				// It refills interval/tokens a tick (1,000 of the admitting
				// scenario's 10,000 per 10ms): this run's 50 keys, at 9M
				// decisions a second, ask 1,800 a key a tick, and it
				// denies; the bench's 1,000 keys ask at most 200.
			default:
				require.Less(t, r.DeniedShare, 0.1, "%s: %s", sc.name, r.Contender)
			}
		}
	}
}

// BenchmarkMemory is the memory scenarios of the command as Go benchmarks,
// for benchstat and profiles:
//
//	go test ./bench/peers -run - -bench 'Memory/denying-1/' -cpuprofile cpu.out
func BenchmarkMemory(b *testing.B) {
	for _, sc := range scenarios(64) {
		if sc.network {
			continue
		}
		for _, m := range memoryMakers() {
			b.Run(benchName(sc)+"/"+strings.ReplaceAll(m.name, " ", "_"), func(b *testing.B) {
				benchmark(b, sc, m, "")
			})
		}
	}
}

// BenchmarkRedis is the network scenario on the package's Redis server
// ($REDIS_ADDR, or redis-server from PATH).
func BenchmarkRedis(b *testing.B) {
	srv := testserver.Get(b, testserver.Redis)
	for _, sc := range scenarios(64) {
		if !sc.network {
			continue
		}
		for i, m := range networkMakers(srv.Addr, 64*runtime.GOMAXPROCS(0)) {
			b.Run(strings.ReplaceAll(m.name, " ", "_"), func(b *testing.B) {
				benchmark(b, sc, m, "peers:bench:"+strconv.FormatInt(time.Now().UnixNano(), 36)+":"+strconv.Itoa(i)+":")
			})
		}
	}
}

// benchName is a scenario's short name: "denying-1", "admitting-64".
func benchName(sc scenario) string {
	kind := "denying"
	if sc.warm == 1 {
		kind = "admitting"
	}
	return kind + "-" + strconv.Itoa(sc.goroutines)
}

func benchmark(b *testing.B, sc scenario, m maker, ns string) {
	c, err := m.open(sc.limit, sc.window, ns)
	if err != nil {
		b.Fatal(err)
	}
	defer c.close()
	keys := benchKeys()
	ctx := context.Background()
	for _, k := range keys {
		for range sc.warm {
			if _, err := c.allow(ctx, k); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	if sc.goroutines == 1 {
		for i := 0; i < b.N; i++ {
			if _, err := c.allow(ctx, keys[i%len(keys)]); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	var next atomic.Int64
	b.SetParallelism(max(1, sc.goroutines/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(97))
		for pb.Next() {
			i++
			if _, err := c.allow(ctx, keys[i%len(keys)]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func benchKeys() []string {
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	return keys
}

// -scripts runs every script in the server's loop (each one deciding, on
// its keys) and reports each beside redis_rate's.
func TestTheScriptsLoopReportsEveryScript(t *testing.T) {
	srv := testserver.Get(t, testserver.Redis)
	text, err := redisRateScript()
	require.NoError(t, err)
	require.Contains(t, text, "redis.call(\"TIME\")", "redis_rate's GCRA script, from its source")
	var out strings.Builder
	require.NoError(t, runScripts(srv.Addr, 1, &out, io.Discard))
	for _, l := range loopScripts(text) {
		require.Contains(t, out.String(), l.name)
	}
	require.Contains(t, out.String(), "1.00x", "redis_rate's own row")
}
