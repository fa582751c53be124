package main

import (
	"context"
	"path/filepath"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/servertest/serverinfo"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// On a fresh server the first request found no library and paid its load
// (a failed FCALL, FUNCTION LOAD, the FCALL again): on a busy machine past
// -timeout, so the guard answered it locally and the server never counted
// it (the differential run against envoyproxy/ratelimit showed it). The
// store is warm before ratelimitd serves: the first request's FCALL runs
// at once, and nothing is loaded for it.
func TestTheStoreIsWarmBeforeServing(t *testing.T) {
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "limits.yaml"), `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
`)
	for _, scheme := range []string{"redis", "valkey"} {
		t.Run(scheme, func(t *testing.T) {
			srv := testserver.Own(t, testserver.Redis)
			admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = admin.Close() })
			ctx := context.Background()
			d := start(t, "-config", cfg, "-store", scheme+"://"+srv.Addr, "-near-cache", "0", "-timeout", "10s")
			require.NoError(t, admin.ConfigResetStat(ctx).Err())

			res, err := d.ask(ctx, "api", []string{"user", "first"})
			require.NoError(t, err)
			require.EqualValues(t, 4, res.Statuses[0].LimitRemaining)
			stats, err := serverinfo.CommandStats(ctx, admin)
			require.NoError(t, err)
			require.Zero(t, stats["function|load"].Calls, "the library was loaded before serving: %s", d.logs())
			require.Equal(t, serverinfo.Stat{Calls: 1, Usec: stats["fcall"].Usec}, stats["fcall"], "one FCALL, which did not fail")
		})
	}
}

// A store that does not answer at start is warned of, and ratelimitd
// serves all the same (the warm-up gives up at its bound): its requests
// are the guard's to answer.
func TestAStoreDownAtStartIsWarnedOfAndServed(t *testing.T) {
	srv := testserver.Own(t, testserver.Redis)
	addr := srv.Addr
	srv.Stop()
	d := start(t, "-config", "../../examples/ratelimitd.yaml", "-store", "redis://"+addr+"?max_retries=-1")
	require.Contains(t, d.logs(), "the store did not answer the warm-up")
}
