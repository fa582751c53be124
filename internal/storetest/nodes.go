package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/guard"
	"github.com/ratelimit-go/ratelimit/internal/testserver"
)

// OneNodeDown stalls one master of a 3-master cluster (SIGSTOP) for 3 s
// while 16 callers hammer 300 keys through a guard with a local fallback,
// and requires the keys of the two healthy masters to be decided by the
// store in at least 95% of their calls: one node's loss stays that node's.
// With one breaker for the whole store they were held to the fallback's
// share: 33-47 of 22,000 calls went to their masters.
func OneNodeDown(t *testing.T, kind testserver.Kind, newStore NewClusterStore) {
	c := testserver.OwnReplicatedCluster(t, kind, 30*time.Second) // no failover within the stall
	primary := newStore(t, c.Addrs)
	sharded, ok := primary.(backend.ShardedStore)
	require.True(t, ok, "a store on a cluster client names the node of a key")
	local, err := memory.New(memory.WithSweepInterval(0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = local.Close() })
	g, err := guard.New(primary, guard.WithFailures(3), guard.WithCoolDown(200*time.Millisecond), guard.WithFallback(local, 2))
	require.NoError(t, err)
	pre := prefix()
	l := limiter(t, g, ratelimit.NewPolicy(ratelimit.FixedWindow, 1_000_000, time.Second), pre, ratelimit.WithTimeout(ratelimit.DefaultTimeout))

	const keys, workers, stall = 300, 16, 3 * time.Second
	stalled := c.Masters[0].Addr
	onStalled := map[string]bool{}
	ctx := context.Background()
	for i := range keys {
		key := fmt.Sprint("user-", i)
		_, err := l.Allow(ctx, key) // connected everywhere, the layout known
		require.NoError(t, err)
		node := ""
		require.Eventually(t, func() bool { node = sharded.Node(pre, key); return node != "" }, 5*time.Second, 10*time.Millisecond)
		onStalled[key] = node == stalled
	}
	require.NoError(t, c.Masters[0].Pause())
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			require.NoError(t, c.Masters[0].Resume())
		}
	}
	t.Cleanup(resume)

	var mu sync.Mutex
	bySource := map[bool]map[ratelimit.Source]int{false: {}, true: {}} // by onStalled
	failed := map[bool]int{}
	stop := time.Now().Add(stall)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(stop); i += workers {
				key := fmt.Sprint("user-", i%keys)
				d, err := l.Allow(ctx, key)
				mu.Lock()
				if err != nil {
					failed[onStalled[key]]++
				} else {
					bySource[onStalled[key]][d.Source]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	resume()

	healthy := bySource[false]
	total := healthy[ratelimit.SourceStore] + healthy[ratelimit.SourceFallback] + failed[false]
	t.Logf("healthy masters' keys: %d calls, %d by the store, %d by the fallback, %d failed; the stalled master's: %v, %d failed",
		total, healthy[ratelimit.SourceStore], healthy[ratelimit.SourceFallback], failed[false], bySource[true], failed[true])
	require.Positive(t, total)
	require.GreaterOrEqual(t, float64(healthy[ratelimit.SourceStore]), 0.95*float64(total),
		"the keys of healthy masters are decided by the store while another master is down")
	require.Positive(t, bySource[true][ratelimit.SourceFallback], "the stalled master's keys went to the fallback")
}
