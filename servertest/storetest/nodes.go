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
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// OneNodeDown stalls one master of a 3-master cluster (SIGSTOP) for 3 s
// while 16 callers hammer 300 keys through a guard with a local fallback,
// every other call a Multi of a key of a healthy master and one of the
// stalled master's: one node's loss stays that node's. The keys of the two
// healthy masters go to the fallback only for failures of their own
// masters: none at all when no call to a healthy master failed or
// outlasted the budget, and fewer than half when a busy machine made some
// of them fail too. With one breaker for the whole store they were held to
// the fallback's share: 33-47 of 22,000 calls went to their masters; with
// a Multi's failure charged to its first key's node, 171 of 207.
func OneNodeDown(t *testing.T, kind testserver.Kind, newStore NewClusterStore) {
	c := testserver.OwnReplicatedCluster(t, kind, 30*time.Second) // no failover within the stall
	store := newStore(t, c.Addrs)
	nodeOf := store.Info().Node
	require.NotNil(t, nodeOf, "a store on a cluster client names the node of a key")
	primary := &watched{Store: store, failed: map[string]int{}}
	local, err := memory.New(memory.WithSweepInterval(0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = local.Close() })
	g, err := guard.New(primary, guard.WithFailures(3), guard.WithCoolDown(200*time.Millisecond), guard.WithFallback(local, 2))
	require.NoError(t, err)
	pre := Prefix()
	// A budget that a descheduled caller rarely outlasts: the stalled
	// master fails every call whatever the budget; a healthy one only
	// when the machine is too busy to answer within it.
	const budget = time.Second
	l := Limiter(t, g, ratelimit.NewPolicy(ratelimit.FixedWindow, 1_000_000, time.Second), pre, ratelimit.WithTimeout(budget))
	other := Limiter(t, g, ratelimit.NewPolicy(ratelimit.FixedWindow, 1_000_000, time.Second), pre+"other:", ratelimit.WithTimeout(budget))
	multi, err := ratelimit.NewMulti(l, other)
	require.NoError(t, err)

	const keys, workers, stall = 300, 16, 3 * time.Second
	stalled := c.Masters[0].Addr
	onStalled := map[string]bool{}
	ctx := context.Background()
	for i := range keys {
		key := fmt.Sprint("user-", i)
		_, err := l.Allow(ctx, key) // connected everywhere, the layout known
		require.NoError(t, err)
		node := ""
		require.Eventually(t, func() bool { node = nodeOf(pre, key); return node != "" }, 5*time.Second, 10*time.Millisecond)
		onStalled[key] = node == stalled
	}
	var healthyKeys, stalledKeys []string
	for i := range keys {
		key := fmt.Sprint("user-", i)
		if onStalled[key] {
			stalledKeys = append(stalledKeys, key)
		} else {
			healthyKeys = append(healthyKeys, key)
		}
	}
	require.NotEmpty(t, stalledKeys)
	require.NotEmpty(t, healthyKeys)
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
	failed, slow := map[bool]int{}, map[bool]int{}
	primary.watch()
	stop := time.Now().Add(stall)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(stop); i += workers {
				if i%2 == 1 { // a Multi whose second key's node is stalled
					_, _ = multi.Allow(ctx, healthyKeys[i%len(healthyKeys)], stalledKeys[i%len(stalledKeys)])
					continue
				}
				key := fmt.Sprint("user-", i%keys)
				start := time.Now()
				d, err := l.Allow(ctx, key)
				took := time.Since(start)
				mu.Lock()
				if took >= budget {
					slow[onStalled[key]]++
				}
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
	ownFailures := primary.failures(onStalled, false)
	t.Logf("healthy masters' keys: %d calls, %d by the store, %d by the fallback, %d failed, %d calls to their masters failed, %d outlasted the budget; the stalled master's: %v, %d failed",
		total, healthy[ratelimit.SourceStore], healthy[ratelimit.SourceFallback], failed[false], ownFailures, slow[false], bySource[true], failed[true])
	require.Positive(t, total)
	require.Zero(t, failed[false], "a fallback answers for the keys of healthy masters")
	if ownFailures == 0 && slow[false] == 0 {
		require.Zero(t, healthy[ratelimit.SourceFallback],
			"the keys of healthy masters, whose calls never failed, are decided by the store while another master is down")
	} else {
		require.Greater(t, healthy[ratelimit.SourceStore], total/2,
			"the keys of healthy masters are mostly decided by the store while another master is down")
	}
	require.Positive(t, bySource[true][ratelimit.SourceFallback], "the stalled master's keys went to the fallback")
}

// watched is a primary store that counts, once watching, the failed Takes
// of each key: what sends a key to the fallback through its own node.
type watched struct {
	backend.Store
	mu       sync.Mutex
	watching bool
	failed   map[string]int // by key
}

func (w *watched) watch() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.watching = true
}

func (w *watched) Take(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	o, err := w.Store.Take(ctx, req)
	if err != nil {
		w.mu.Lock()
		if w.watching {
			w.failed[req.Key]++
		}
		w.mu.Unlock()
	}
	return o, err
}

// failures is the number of failed Takes of the keys whose onStalled is
// stalled.
func (w *watched) failures(onStalled map[string]bool, stalled bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for key, f := range w.failed {
		if onStalled[key] == stalled {
			n += f
		}
	}
	return n
}
