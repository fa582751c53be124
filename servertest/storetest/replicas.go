package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// LaggingReplica measures what a failover forgets when the replica lags:
// on a cluster of three masters with a replica each, one master's replica
// is cut off (stopped, its replication link killed), the master admits
// requests only it holds, dies, and the stale replica is promoted. The
// promoted replica forgets the admissions made meanwhile: the figure is
// logged, and must be above 0 (replication is asynchronous). Through a
// store built to wait for a replica's acknowledgement (acked), the
// admissions its caller was told of are all there after the failover: 0
// forgotten. notReplicated is the error an unacknowledged write wraps.
func LaggingReplica(t *testing.T, kind testserver.Kind, plain, acked NewClusterStore, notReplicated error) {
	forgot, told := lagAndFailover(t, kind, plain, nil)
	t.Logf("without the acknowledgement: the promoted replica forgot %d of %d admissions", forgot, told)
	require.Positive(t, forgot, "a lagging replica forgets what it did not get")
	forgot, told = lagAndFailover(t, kind, acked, notReplicated)
	t.Logf("with the acknowledgement: forgot %d of the %d admissions the caller was told of", forgot, told)
	require.Zero(t, forgot, "no admission the caller was told of is forgotten")
	require.Positive(t, told, "admissions made while the replica was there were acknowledged")
}

// lagAndFailover runs one failover with a lagging replica, and returns how
// many admissions the caller was told of and how many of those the
// promoted replica does not hold. With notReplicated, the admissions
// made while the replica is cut off must fail with it.
func lagAndFailover(t *testing.T, kind testserver.Kind, newStore NewClusterStore, notReplicated error) (forgot, told int) {
	c := testserver.OwnReplicatedCluster(t, kind, time.Second, "--cluster-require-full-coverage", "no")
	store := newStore(t, c.Addrs)
	node := store.Info().Node
	require.NotNil(t, node, "a store on a cluster client names the node of a key")
	pre := Prefix()
	l := Limiter(t, store, ratelimit.NewPolicy(ratelimit.FixedWindow, ratelimit.MaxLimit, ratelimit.MaxWindow), pre, ratelimit.WithTimeout(2*time.Second))
	ctx := context.Background()
	key := ""
	require.Eventually(t, func() bool { // a key on the first master
		for i := 0; i < 100 && key == ""; i++ {
			if k := fmt.Sprint("lag-", i); node(pre, k) == c.Masters[0].Addr {
				key = k
			}
		}
		return key != ""
	}, 5*time.Second, 10*time.Millisecond)
	admit := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			d, err := l.Allow(ctx, key)
			switch {
			case err == nil:
				require.True(t, d.Allowed)
				told++
			case notReplicated != nil && errors.Is(err, notReplicated):
			default:
				require.NoError(t, err)
			}
		}
	}
	admit(10)
	time.Sleep(200 * time.Millisecond) // replicated, on loopback

	// The replica is cut off: stopped, so that it cannot reconnect, and its
	// link killed, so that nothing more reaches even its socket.
	require.NoError(t, c.Replicas[0].Pause())
	require.NoError(t, Admin(t, c.Masters[0].Addr).Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err())
	before, more := told, 20
	if notReplicated != nil {
		more = 5 // each waits for the acknowledgement's timeout
	}
	admit(more)
	if notReplicated != nil {
		require.Equal(t, before, told, "no write without the replica is acknowledged")
	}
	require.NoError(t, c.Masters[0].Kill())
	require.NoError(t, c.Replicas[0].Resume())

	var count int
	require.Eventually(t, func() bool { // the replica promoted, the client following
		d, err := l.Peek(ctx, key)
		count = d.Count
		return err == nil
	}, 20*time.Second, 50*time.Millisecond, "the replica takes over")
	return max(told-count, 0), told
}
