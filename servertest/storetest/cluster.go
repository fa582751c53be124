package storetest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
)

// Spread drives 1,000 users through store, on a cluster whose nodes are at
// addrs, and requires their keys to spread over every master: each holds a
// fair share (a third, give or take a few percent), and no key is anywhere
// but on the master of its slot (a script touching two slots would have
// failed with CROSSSLOT).
func Spread(t *testing.T, addrs []string, store backend.Store) {
	ctx := context.Background()
	pre := Prefix()
	for _, alg := range backend.Algorithms() {
		l := Limiter(t, store, ratelimit.NewPolicy(alg, 10, time.Minute), pre+alg.String()+":", clusterBudget)
		for u := 0; u < 1000; u++ {
			_, err := l.Allow(ctx, "user-"+strconv.Itoa(u))
			require.NoError(t, err)
		}
	}
	want := 0
	for _, alg := range backend.Algorithms() {
		want += 1000 * len(storedKeysOf(t, pre+alg.String()+":", "user-0", ratelimit.NewPolicy(alg, 10, time.Minute)))
	}
	held := map[string]int{}
	total := 0
	for _, addr := range addrs {
		node := Admin(t, addr)
		role, err := node.Do(ctx, "ROLE").Slice()
		require.NoError(t, err)
		if role[0] != "master" {
			continue
		}
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, pre+"*", 1000).Result()
			require.NoError(t, err)
			held[addr] += len(keys)
			for _, k := range keys {
				slot, err := node.ClusterKeySlot(ctx, k).Result()
				require.NoError(t, err)
				require.True(t, ownsSlot(t, node, slot), "%s holds %q of slot %d, which it does not serve", addr, k, slot)
				break // one per batch: the spot check is enough, CROSSSLOT guards the rest
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
		total += held[addr]
	}
	require.Len(t, held, 3, "three masters")
	require.Equal(t, want, total, "every key of 1,000 users under 4 algorithms, once")
	for addr, n := range held {
		share := float64(n) / float64(total)
		t.Logf("master %s holds %d keys (%.1f%%)", addr, n, 100*share)
		require.InDelta(t, 1.0/3, share, 0.06, "master %s's share of the keys", addr)
	}
}

// ownsSlot reports whether node serves slot.
func ownsSlot(t *testing.T, node *goredis.Client, slot int64) bool {
	out, err := node.Do(context.Background(), "CLUSTER", "NODES").Text()
	require.NoError(t, err)
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.Contains(f[2], "myself") {
			continue
		}
		for _, r := range f[8:] {
			from, to, _ := strings.Cut(r, "-")
			a, _ := strconv.ParseInt(from, 10, 64)
			b, err := strconv.ParseInt(to, 10, 64)
			if err != nil {
				b = a
			}
			if slot >= a && slot <= b {
				return true
			}
		}
	}
	return false
}
