package redis_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/servertest/storetest"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// A ChargeAll over the keys of three masters, one of them dead (its
// replica not promoted yet): the call returns a ShardError naming the
// dead master's key; the two live masters' charges are made, their
// outcomes in outs and their counts on the servers, and the dead one's
// outcome is zero. (A caller then knows which policies were charged:
// Multi.ChargeN answers those and an error for the rest.)
func TestAChargeAllWithADeadMasterKeepsTheOthersCharges(t *testing.T) {
	c := testserver.OwnReplicatedCluster(t, testserver.Redis, time.Minute, "--cluster-require-full-coverage", "no")
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs, ContextTimeoutEnabled: true,
		MinRetryBackoff: -1, MaxRetryBackoff: -1,
		NewClient: func(opt *goredis.Options) *goredis.Client {
			opt.DialerRetries = 1 // one dial to the dead node, not five 100ms apart
			return goredis.NewClient(opt)
		}})
	t.Cleanup(func() { _ = cc.Close() })
	s := store(t, cc)
	ctx := context.Background()
	a := storetest.Admin(t, c.Masters[1].Addr)
	var keyOn [3]string // a key on each master
	for i := 0; keyOn[0] == "" || keyOn[1] == "" || keyOn[2] == ""; i++ {
		k := "u" + strconv.Itoa(i)
		slot, err := a.ClusterKeySlot(ctx, "{"+k+"}").Result()
		require.NoError(t, err)
		if m := slot * 3 / 16384; keyOn[m] == "" {
			keyOn[m] = k
		}
	}
	rule, err := backend.NewRule(backend.FixedWindow, 100, time.Hour, 0, time.Hour, storetest.Prefix())
	require.NoError(t, err)
	reqs := []backend.Request{{Rule: rule, Key: keyOn[0], Cost: 7}, {Rule: rule, Key: keyOn[1], Cost: 7}, {Rule: rule, Key: keyOn[2], Cost: 7}}
	outs := make([]backend.Outcome, len(reqs))
	require.NoError(t, s.ChargeAll(ctx, reqs, outs), "every master alive")
	require.Equal(t, []int64{7, 7, 7}, []int64{outs[0].Count, outs[1].Count, outs[2].Count})

	require.NoError(t, c.Masters[0].Kill())
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = s.ChargeAll(cctx, reqs, outs)
	var shard *backend.ShardError
	require.True(t, errors.As(err, &shard), "a shard's failure: %v", err)
	require.Equal(t, keyOn[0], shard.Key, "the dead master's key")
	require.Zero(t, outs[0], "not charged: no outcome")
	for i := 1; i < 3; i++ {
		require.NotZero(t, outs[i].At, "master %d answered", i)
		require.Equal(t, int64(14), outs[i].Count, "master %d: charged again", i)
		out, err := s.Peek(ctx, backend.Request{Rule: rule, Key: keyOn[i], Cost: 1})
		require.NoError(t, err)
		require.Equal(t, int64(14), out.Count, "master %d: the charge is on the server", i)
	}
}
