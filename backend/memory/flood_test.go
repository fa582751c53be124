package memory_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
)

// A flood of new keys once gave the keys in active use their quota again:
// every new key was marked "used" as it arrived, so the eviction sweep
// passed over the flood and dropped keys that were just used. With
// WithMaxKeys(1000) and one shard, 100 new keys between two requests of a
// key at its limit let 31 of its next 40 requests through. Now new keys
// wait on probation, and for N new keys between two requests, N up to the
// capacity of the key's shard and beyond, the key admits nothing beyond
// its limit, on one shard and on the default shards.
func TestAFloodOfNewKeysDoesNotResetAKeyInUse(t *testing.T) {
	const maxKeys, limit, rounds = 1000, 10, 40
	for _, opts := range [][]memory.Option{{memory.WithShards(1)}, nil} {
		clock := &manualClock{now: time.Unix(1_700_000_000, 0)}
		s, err := memory.New(append(opts, memory.WithMaxKeys(maxKeys), memory.WithSweepInterval(0), memory.WithStoreClock(clock.Now))...)
		require.NoError(t, err)
		l := newLimiter(t, s, ratelimit.PerHour(limit), clock.Now)
		ctx := context.Background()
		shardIndex := func(key string) uint64 { // of the key's state under the Limiter's prefix and algorithm
			i, _ := s.ShardOf(ratelimit.DefaultPrefix, key, backend.SlidingWindow)
			return i
		}
		shard, capacity := s.ShardOf(ratelimit.DefaultPrefix, "victim", backend.SlidingWindow)
		fresh := 0
		newKey := func() string { // a key never seen, in the victim's shard
			for {
				fresh++
				if k := fmt.Sprint("flood-", fresh); shardIndex(k) == shard {
					return k
				}
			}
		}
		for i := 0; i < limit; i++ {
			d, err := l.Allow(ctx, "victim")
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		for _, n := range []int{1, capacity / 10, capacity / 2, capacity - 1, capacity, 2 * capacity} {
			over := 0
			for r := 0; r < rounds; r++ {
				for i := 0; i < n; i++ {
					_, err := l.Allow(ctx, newKey())
					require.NoError(t, err)
				}
				clock.now = clock.now.Add(time.Millisecond)
				d, err := l.Allow(ctx, "victim")
				require.NoError(t, err)
				if d.Allowed {
					over++
				}
			}
			require.Zero(t, over, "%d shards of %d keys: %d new keys between two requests of a key at its limit let it through again", s.Shards(), capacity, n)
		}
		require.LessOrEqual(t, s.Len(), maxKeys)
		require.NoError(t, s.Close())
	}
}

// The store keeps each algorithm's keys in a table of its own; the tables
// share their shard's bound. A flood of new keys under one algorithm stays
// within the bound and does not evict a key in active use under another:
// the flood's own keys, on probation, make room first.
func TestTheAlgorithmsShareTheBoundAndTheFloodEvictsItsOwn(t *testing.T) {
	const maxKeys, limit = 100, 5
	clock := &manualClock{now: time.Unix(1_700_000_000, 0)}
	s, err := memory.New(memory.WithShards(1), memory.WithMaxKeys(maxKeys), memory.WithSweepInterval(0), memory.WithStoreClock(clock.Now))
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	victims := map[ratelimit.Algorithm]*ratelimit.Limiter{}
	for _, alg := range []ratelimit.Algorithm{ratelimit.GCRA, ratelimit.SlidingWindow, ratelimit.SlidingWindowCounter} {
		victims[alg] = newLimiter(t, s, ratelimit.NewPolicy(alg, limit, time.Hour), clock.Now)
		for range limit {
			d, err := victims[alg].Allow(ctx, "victim")
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
	}
	flood := newLimiter(t, s, ratelimit.NewPolicy(ratelimit.FixedWindow, limit, time.Hour), clock.Now)
	for i := range 10 * maxKeys {
		_, err := flood.Allow(ctx, fmt.Sprint("flood-", i))
		require.NoError(t, err)
		require.LessOrEqual(t, s.Len(), maxKeys)
		if i%50 == 0 {
			for alg, l := range victims {
				d, err := l.Allow(ctx, "victim")
				require.NoError(t, err)
				require.False(t, d.Allowed, "%v: the victim got a fresh quota after %d new keys", alg, i+1)
			}
		}
	}
	require.Equal(t, maxKeys, s.Len(), "the bound is full, with the victims in it")
	room := maxKeys - len(victims)
	require.Equal(t, uint64(10*maxKeys-room), s.ActiveEvictions(), "each flood key past the room evicted one, and no victim")
}

// A key denied without the lock (see the store's denials) is not marked
// used by those denials; the sweep that clears its mark withdraws what it
// published, so its next Take marks it again, and a flood of keys each used
// twice (protected, so that the sweep picks among them) between two of its
// requests never evicts it into a fresh quota.
func TestAFloodOfProtectedKeysDoesNotResetAKeyDeniedWithoutTheLock(t *testing.T) {
	const maxKeys, limit, rounds = 200, 5, 30
	ctx := context.Background()
	for _, alg := range denyingAlgorithms {
		clock := &manualClock{now: time.Unix(1_700_000_000, 0)}
		s, err := memory.New(memory.WithShards(1), memory.WithMaxKeys(maxKeys), memory.WithSweepInterval(0), memory.WithStoreClock(clock.Now))
		require.NoError(t, err)
		l, err := ratelimit.New(s, ratelimit.NewPolicy(alg, limit, time.Hour)) // on the store's clock
		require.NoError(t, err)
		for range limit + 2 {
			_, err := l.Allow(ctx, "victim")
			require.NoError(t, err)
		}
		require.True(t, s.Denying(ratelimit.DefaultPrefix, "victim", alg), "%v: the victim is not denied without the lock", alg)
		fresh := 0
		for r := 0; r < rounds; r++ {
			for range maxKeys / 2 {
				fresh++
				k := fmt.Sprint("flood-", fresh)
				for range 2 {
					_, err := l.Allow(ctx, k)
					require.NoError(t, err)
				}
			}
			clock.now = clock.now.Add(time.Millisecond)
			for range 3 {
				d, err := l.Allow(ctx, "victim")
				require.NoError(t, err)
				require.False(t, d.Allowed, "%v, round %d: the victim got a fresh quota", alg, r)
			}
		}
		require.NotZero(t, s.ActiveEvictions(), "%v: the flood evicted nothing: the sweep never ran", alg)
		require.NoError(t, s.Close())
	}
}

// A bound under 1 once became 1 silently; it is now an error, and no store,
// which names its package first, as every error of the module does (these
// once began with the sentinel's "ratelimit:").
func TestBadOptionsAreAnError(t *testing.T) {
	for name, o := range map[string]memory.Option{
		"WithMaxKeys(0)": memory.WithMaxKeys(0), "WithMaxKeys(-1)": memory.WithMaxKeys(-1), "WithMaxEntries(0)": memory.WithMaxEntries(0),
		"WithShards(0)": memory.WithShards(0), "WithWhenFull(9)": memory.WithWhenFull(9),
	} {
		s, err := memory.New(o)
		require.ErrorIs(t, err, ratelimit.ErrInvalidArgument, name)
		require.True(t, strings.HasPrefix(err.Error(), "ratelimit/memory: "), "%s: %v", name, err)
		require.Nil(t, s, name)
	}
}
