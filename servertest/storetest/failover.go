package storetest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// NewClusterStore returns a store on a new cluster client of the nodes at
// addrs.
type NewClusterStore func(t *testing.T, addrs []string) backend.Store

// Failover kills one master of a real cluster (three masters, a replica
// each, cluster-node-timeout 1s) under load from 16 goroutines, each with
// keys of its own on every master, with a time budget of 500ms, and
// requires:
//   - every failed call to fail within its budget, a margin and the
//     scheduling noise measured in the same run, with an error wrapping
//     ratelimit.ErrStore;
//   - the other masters' keys to keep being decided, at their speed;
//   - the dead master's keys to be decided again soon after its replica is
//     promoted;
//
// and, when failFast, the dead master's calls to fail at once: in under 50ms
// on average, against a budget of 500ms (a client that backs off on a dead
// node holds its callers there, 80-115ms a call with go-redis's defaults,
// and the healthy masters' keys, which the same callers also ask for, are
// decided at a fraction of their rate: logged). It reports the figures, with the requests
// that asynchronous replication lost: admitted by the dead master and not
// replicated before it died, so not counted by the new one, which can
// therefore admit them again.
// With guarded, the store is expected to be a guard.Store with a local
// fallback: no call fails at all, and the figures say how many decisions the
// fallback made for each master.
func Failover(t *testing.T, kind testserver.Kind, newStore NewClusterStore, failFast, guarded bool) {
	// A budget of 500ms: under the race detector, with six servers and the
	// load on two cores, a goroutine can wait for the CPU longer than the
	// default 100ms before its call even starts, and a healthy master's key
	// would time out for the machine's sake, not the cluster's.
	const goroutines, keysPerMaster, budget, margin = 16, 4, 500 * time.Millisecond, 250 * time.Millisecond
	// Without cluster-require-full-coverage no, every master refuses every
	// command (CLUSTERDOWN) from the moment one is marked failed until its
	// replica is promoted: the healthy shards stop too.
	c := testserver.OwnReplicatedCluster(t, kind, time.Second, "--cluster-require-full-coverage", "no")
	// Every request is admitted and counted, so that the count each key
	// holds after the failover can be compared with what was admitted.
	l := Limiter(t, newStore(t, c.Addrs), ratelimit.NewPolicy(ratelimit.FixedWindow, ratelimit.MaxLimit, ratelimit.MaxWindow), Prefix(),
		ratelimit.WithTimeout(budget))
	ctx := context.Background()

	// Keys of each goroutine on each master, found by asking the cluster.
	a := Admin(t, c.Masters[0].Addr)
	masterOf := func(key string) int {
		slot, err := a.ClusterKeySlot(ctx, "{"+key+"}").Result()
		require.NoError(t, err)
		return int(slot * 3 / 16384)
	}
	type key struct {
		name   string
		master int
	}
	keys := make([][]key, goroutines)
	for g := range keys {
		need := [3]int{}
		for i := 0; need != [3]int{keysPerMaster, keysPerMaster, keysPerMaster}; i++ {
			name := "g" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
			if m := masterOf(name); need[m] < keysPerMaster {
				need[m]++
				keys[g] = append(keys[g], key{name, m})
			}
		}
	}

	type stats struct {
		calls, failed     atomic.Int64
		failedTook        atomic.Int64 // ns, summed
		slowestFail       atomic.Int64 // ns
		local             atomic.Int64 // decisions of a fallback
		lastLocal, lastOK atomic.Int64 // ns since the kill
		lastFail, firstOK atomic.Int64 // ns since the kill
		firstErr          atomic.Value
	}
	var perMaster [3]stats
	var admitted sync.Map // key -> *atomic.Int64
	var wrongErr atomic.Value
	var killed atomic.Int64 // UnixNano of the kill, 0 before
	noise := testserver.StartNoise()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(mine []key) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := mine[i%len(mine)]
				began := time.Now()
				d, err := l.Allow(ctx, k.name)
				took := time.Since(began)
				st := &perMaster[k.master]
				st.calls.Add(1)
				since := int64(0)
				if at := killed.Load(); at != 0 {
					since = time.Now().UnixNano() - at
				}
				if err != nil {
					st.failed.Add(1)
					st.failedTook.Add(int64(took))
					st.lastFail.Store(since)
					st.firstErr.CompareAndSwap(nil, err.Error()+" after "+time.Duration(since).String())
					for old := st.slowestFail.Load(); int64(took) > old && !st.slowestFail.CompareAndSwap(old, int64(took)); old = st.slowestFail.Load() {
					}
					if !errors.Is(err, ratelimit.ErrStore) {
						wrongErr.CompareAndSwap(nil, err)
					}
					continue
				}
				if d.Source == ratelimit.SourceFallback {
					st.local.Add(1)
					st.lastLocal.Store(since)
					continue // not the cluster's decision
				}
				if since > 0 {
					st.firstOK.CompareAndSwap(0, since)
					st.lastOK.Store(since)
				}
				if d.Allowed {
					n, _ := admitted.LoadOrStore(k.name, new(atomic.Int64))
					n.(*atomic.Int64).Add(1)
				}
			}
		}(keys[g])
	}

	time.Sleep(time.Second)
	var before [3]int64
	beforeAt := time.Now()
	for m := range perMaster {
		before[m] = perMaster[m].calls.Load()
	}
	require.NoError(t, c.Masters[0].Kill())
	killed.Store(time.Now().UnixNano())
	promoted := time.Duration(0)
	require.Eventually(t, func() bool {
		role, err := Admin(t, c.Replicas[0].Addr).Do(ctx, "ROLE").Slice()
		if err == nil && role[0] == "master" {
			promoted = time.Duration(time.Now().UnixNano() - killed.Load())
			return true
		}
		return false
	}, 20*time.Second, 10*time.Millisecond, "the replica is promoted")
	// The dead master's keys decide again soon after the promotion.
	dead := &perMaster[0]
	lastBad := func() int64 { return max(dead.lastFail.Load(), dead.lastLocal.Load()) }
	require.Eventually(t, func() bool {
		ok := dead.lastOK.Load()
		return ok > int64(promoted) && ok > lastBad()
	}, promoted+10*time.Second, 10*time.Millisecond, "decisions for the dead master's keys resume")
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	late := noise.Stop()

	after := time.Since(beforeAt)
	require.Nil(t, wrongErr.Load(), "an error not wrapping ratelimit.ErrStore")
	resumed := time.Duration(lastBad())
	lost := int64(0)
	admitted.Range(func(k, n any) bool {
		d, err := l.Peek(ctx, k.(string))
		require.NoError(t, err)
		lost += max(0, n.(*atomic.Int64).Load()-int64(d.Count))
		return true
	})
	t.Logf("replica promoted %v after the kill; the dead master's keys failed (or went to the fallback) until %v (%d of %d calls failed, in %v each on average, the slowest %v; first: %v); scheduling noise %v",
		promoted, resumed, dead.failed.Load(), dead.calls.Load(), time.Duration(dead.failedTook.Load()/max(1, dead.failed.Load())),
		time.Duration(dead.slowestFail.Load()), dead.firstErr.Load(), late)
	for m := 0; m < 3; m++ {
		t.Logf("master %d: %d decisions by the local fallback", m, perMaster[m].local.Load())
	}
	for m := 1; m < 3; m++ {
		st := &perMaster[m]
		t.Logf("master %d: %d calls/s before the kill, %.0f/s after, %d failed (first: %v)", m, before[m], float64(st.calls.Load()-before[m])/after.Seconds(), st.failed.Load(), st.firstErr.Load())
	}
	t.Logf("admitted requests the new master does not count (lost with the dead master, so admitted again): %d", lost)
	for m := 0; m < 3; m++ {
		require.LessOrEqual(t, time.Duration(perMaster[m].slowestFail.Load()), budget+margin+late,
			"master %d: the slowest failed call against the %v budget, a margin of %v and the scheduling noise (%v)", m, budget, margin, late)
	}
	for m := 1; m < 3; m++ {
		require.Zero(t, perMaster[m].failed.Load(), "master %d's keys kept being decided", m)
	}
	if guarded {
		require.Zero(t, perMaster[0].failed.Load(), "with a fallback, no call fails")
		require.Positive(t, perMaster[0].local.Load(), "the fallback decided for the dead master's keys")
	}
	require.Less(t, resumed, promoted+2*time.Second, "decisions resume within 2s of the promotion")
	if failFast {
		mean := time.Duration(dead.failedTook.Load() / max(1, dead.failed.Load()))
		require.Less(t, mean, 50*time.Millisecond, "the dead master's calls fail at once")
	}
}
