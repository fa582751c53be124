package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// TestEnvoysIntegrationSuiteDecidesTheSame runs the decisions of
// envoyproxy/ratelimit master's integration suite (test/integration,
// testBasicBaseConfig: every decision it asserts, not its statsd counters)
// against the binary, started from that service's environment on its
// runtime directory and a real redis-server: with and without the near
// cache (its local cache), counting every hit or not
// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT). A window that turns during a
// loop (a minute's on a slow machine) is seen in the answers' resets, and
// the loop runs again on fresh keys.
func TestEnvoysIntegrationSuiteDecidesTheSame(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for _, f := range []string{"basic.yaml", "another.yaml"} {
		data, err := os.ReadFile(filepath.Join(upstream, "integration-config", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), data, 0o644))
	}
	redis := testserver.Get(t, testserver.Redis).Addr
	for _, stop := range []bool{false, true} {
		for _, local := range []bool{false, true} {
			t.Run(fmt.Sprintf("stop=%v,localcache=%v", stop, local), func(t *testing.T) {
				env := []string{
					"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redis,
					"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "LOG_FORMAT=json",
					fmt.Sprintf("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=%v", stop),
				}
				if !local {
					env = append(env, "RATELIMITD_NEAR_CACHE=0")
				}
				integrationSuite(t, startWith(t, env, nil), stop)
			})
		}
	}
}

// want is an expected descriptor status: its code, limit and remaining.
type want struct {
	code      rlsv3.RateLimitResponse_Code
	perUnit   uint32
	unit      rlsv3.RateLimitResponse_RateLimit_Unit
	remaining uint32
}

func integrationSuite(t *testing.T, d *daemon, stop bool) {
	ctx := context.Background()
	const ok, over = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	check := func(res *rlsv3.RateLimitResponse, overall rlsv3.RateLimitResponse_Code, wants []want, what string) {
		t.Helper()
		assert.Equal(t, overall, res.GetOverallCode(), what)
		require.Len(t, res.GetStatuses(), len(wants), what)
		for i, w := range wants {
			st := res.GetStatuses()[i]
			assert.Equal(t, w.code, st.GetCode(), "%s: descriptor %d", what, i)
			assert.Equal(t, w.remaining, st.GetLimitRemaining(), "%s: descriptor %d's remaining", what, i)
			if w.perUnit == 0 {
				assert.Nil(t, st.GetCurrentLimit(), what)
				continue
			}
			assert.Equal(t, w.perUnit, st.GetCurrentLimit().GetRequestsPerUnit(), what)
			assert.Equal(t, w.unit, st.GetCurrentLimit().GetUnit(), what)
			assert.NotNil(t, st.GetDurationUntilReset(), "%s: descriptor %d says when it resets", what, i)
		}
	}
	// rolled reports whether a window turned since last (each
	// descriptor's previous reset): a reset further off than before.
	rolled := func(last []time.Duration, res *rlsv3.RateLimitResponse) bool {
		for i, st := range res.GetStatuses() {
			r := st.GetDurationUntilReset().AsDuration()
			if r > last[i] && last[i] > 0 {
				return true
			}
			last[i] = r
		}
		return false
	}
	fresh := func() string { return fmt.Sprint(rand.Int64()) }
	// tally counts, per rule (domain and key), the hits, and those answered
	// within and over the limit: what upstream's counters must say.
	type counts struct{ total, within, over float64 }
	tally := map[[2]string]*counts{}
	ask := func(domain string, descriptors ...[]string) (*rlsv3.RateLimitResponse, error) {
		res, err := d.ask(ctx, domain, descriptors...)
		for i, st := range res.GetStatuses() {
			if st.GetCurrentLimit() == nil {
				continue
			}
			k := [2]string{domain, descriptors[i][0]}
			if tally[k] == nil {
				tally[k] = &counts{}
			}
			tally[k].total++
			if st.GetCode() == over {
				tally[k].over++
			} else {
				tally[k].within++
			}
		}
		return res, err
	}

	res, err := d.ask(ctx, "foo", []string{"hello", "world"})
	require.NoError(t, err)
	check(res, ok, []want{{ok, 0, 0, 0}}, "an unknown domain")

	res, err = ask("basic", []string{"key1", fresh()})
	require.NoError(t, err)
	check(res, ok, []want{{ok, 50, rlsv3.RateLimitResponse_RateLimit_SECOND, 49}}, "basic key1")

	for attempt := 0; ; attempt++ {
		require.Less(t, attempt, 3, "a minute turned during every attempt")
		key, last, turned := fresh(), make([]time.Duration, 1), false
		for i := 0; i < 25 && !turned; i++ {
			res, err := ask("another", []string{"key2", key})
			require.NoError(t, err)
			if turned = rolled(last, res); turned {
				break
			}
			w := want{ok, 20, rlsv3.RateLimitResponse_RateLimit_MINUTE, uint32(20 - (i + 1))}
			if i >= 20 {
				w.code, w.remaining = over, 0
			}
			check(res, w.code, []want{w}, fmt.Sprintf("key2, request %d", i))
		}
		if !turned {
			break
		}
	}

	for attempt := 0; ; attempt++ {
		require.Less(t, attempt, 3, "a window turned during every attempt")
		key, last, turned := fresh(), make([]time.Duration, 2), false
		for i := 0; i < 15 && !turned; i++ {
			res, err := ask("another", []string{"key2", key}, []string{"key3", key})
			require.NoError(t, err)
			if turned = rolled(last, res); turned {
				break
			}
			code, remaining1, remaining2 := ok, uint32(20-(i+1)), uint32(10-(i+1))
			if i >= 10 {
				code, remaining2 = over, 0
				if stop {
					remaining1 = 10 // no hit counted once over
				}
			}
			check(res, code, []want{
				{ok, 20, rlsv3.RateLimitResponse_RateLimit_MINUTE, remaining1},
				{code, 10, rlsv3.RateLimitResponse_RateLimit_HOUR, remaining2},
			}, fmt.Sprintf("key2 and key3, request %d", i))
		}
		if !turned {
			break
		}
	}

	key := fresh()
	first, err := ask("another", []string{"key4", key})
	require.NoError(t, err)
	time.Sleep(2 * time.Second)
	second, err := ask("another", []string{"key4", key})
	require.NoError(t, err)
	assert.Less(t, second.GetStatuses()[0].GetDurationUntilReset().GetSeconds(), first.GetStatuses()[0].GetDurationUntilReset().GetSeconds())

	// Its counters, under its Prometheus names: hits of one each.
	for k, c := range tally {
		series := fmt.Sprintf(`{domain=%q,key1=%q,key2=""}`, k[0], k[1])
		assert.Equal(t, c.total, d.metric(t, "ratelimit_service_rate_limit_total_hits"+series), "%v", k)
		assert.Equal(t, c.over, d.metric(t, "ratelimit_service_rate_limit_over_limit"+series), "%v", k)
		assert.Equal(t, c.within, d.metric(t, "ratelimit_service_rate_limit_within_limit"+series), "%v", k)
	}
	assert.Equal(t, 5.0, tally[[2]string{"another", "key3"}].over, "key3 denied 5 of its 15")
}
