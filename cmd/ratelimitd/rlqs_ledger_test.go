package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/rlqs"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// heldOnServer is what the planes of every bucket on the server at addr
// may enforce now (the server's TIME): the sum, over the ledger's fields,
// of each plane's largest grant whose TTL has not ended.
func heldOnServer(t *testing.T, admin *goredis.Client) int64 {
	ctx := context.Background()
	now, err := admin.Time(ctx).Result()
	require.NoError(t, err)
	keys, err := admin.Keys(ctx, ledgerPrefix+"*").Result()
	require.NoError(t, err)
	sum := int64(0)
	for _, k := range keys {
		fields, err := admin.HGetAll(ctx, k).Result()
		require.NoError(t, err)
		for f, v := range fields {
			if f == "~w" {
				continue
			}
			nums := strings.Fields(v)
			h := int64(0)
			for j := 3; j+2 < len(nums); j += 3 { // demand seen reports, then n until at a grant
				n, _ := strconv.ParseInt(nums[j], 10, 64)
				until, _ := strconv.ParseInt(nums[j+1], 10, 64)
				if until > now.UnixMilli() {
					h = max(h, n)
				}
			}
			sum += h
		}
	}
	return sum
}

// The shares kept on the server (-store redis:// and valkey://), as every
// instance sharing it sees them: planes of two instances reporting one
// bucket with random demands, round after round; what they may enforce
// never sums past the limit; once the grants older than a TTL have ended,
// each plane's grant is its max-min fair share (the script's split, the
// same as fairShares'), whichever instance asked.
func TestTheSharesOnAServerKeepTheLimit(t *testing.T) {
	for _, scheme := range []string{"redis", "valkey"} {
		t.Run(scheme, func(t *testing.T) {
			srv := testserver.Own(t, testserver.Redis)
			admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = admin.Close() })
			var ledgers [2]*stores
			for i := range ledgers {
				o, err := parseFlags([]string{"-config", "x.yaml"}, func(string) string { return "" }, io.Discard)
				require.NoError(t, err)
				st, err := openStore(scheme+"://"+srv.Addr, o, nil, slog.Default())
				require.NoError(t, err)
				t.Cleanup(func() { _ = st.Close() })
				ledgers[i] = st
			}
			ctx := context.Background()
			const limit, planes, ttl = 1000, 10, time.Second
			rng := rand.New(rand.NewPCG(9, 10))
			demands := make([]int64, planes)
			grant := func(i int) int64 {
				g, err := ledgers[i%2].ledger.Grant(ctx, "bucket", time.Second, limit, ttl, fmt.Sprintf("plane-%d", i), demands[i])
				require.NoError(t, err)
				return g
			}
			for round := range 50 {
				for i := range demands {
					demands[i] = rng.Int64N(600)
				}
				for i := range demands {
					grant(i)
					require.LessOrEqual(t, heldOnServer(t, admin), int64(limit), "round %d", round)
				}
			}
			for i := range demands {
				demands[i] = int64(50 * (i + 1)) // 2,750 in all
			}
			for range 2 { // the grants of the random rounds end (a TTL and half again), then each is its share
				time.Sleep(ttl + ttl/2)
				for i := range demands {
					grant(i)
				}
			}
			fair := rlqs.FairShares(limit, demands)
			for i := range demands {
				require.Equal(t, fair[i], grant(i), "plane %d", i)
			}
			require.LessOrEqual(t, heldOnServer(t, admin), int64(limit))
		})
	}
}

// On the server too, a bucket counts rlqs.MaxPlanes planes at most: one
// more is granted nothing and not written.
func TestTheSharesOnAServerCountMaxPlanesABucket(t *testing.T) {
	srv := testserver.Own(t, testserver.Redis)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	o, err := parseFlags([]string{"-config", "x.yaml"}, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	st, err := openStore("redis://"+srv.Addr, o, nil, slog.Default())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	ctx := context.Background()
	for i := range rlqs.MaxPlanes {
		_, err := st.ledger.Grant(ctx, "bucket", time.Second, 1_000_000, time.Minute, fmt.Sprintf("plane-%d", i), 10)
		require.NoError(t, err)
	}
	g, err := st.ledger.Grant(ctx, "bucket", time.Second, 1_000_000, time.Minute, "one-more", 10)
	require.NoError(t, err)
	require.Zero(t, g)
	keys, err := admin.Keys(ctx, ledgerPrefix+"*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1)
	n, err := admin.HLen(ctx, keys[0]).Result()
	require.NoError(t, err)
	require.EqualValues(t, rlqs.MaxPlanes+1, n, "the planes and the window's field")
}
