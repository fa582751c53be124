package redis

import (
	"fmt"

	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
)

// The arguments go-redis formats are those of the script's convention.
func TestArgsAreTheScriptsConvention(t *testing.T) {
	s := newStore(t, goredis.NewClient(&goredis.Options{}))
	rule := func(alg backend.Algorithm, limit int64, window time.Duration, burst int64, retain time.Duration) *backend.Rule {
		r, err := backend.NewRule(alg, limit, window, burst, retain, "p:")
		require.NoError(t, err)
		return r
	}
	for _, req := range []backend.Request{
		{Rule: rule(backend.SlidingWindow, 100, time.Minute, 0, time.Minute), Key: "k", Cost: 1},
		{Rule: rule(backend.FixedWindow, 7, 1500*time.Microsecond, 0, time.Second), Key: "k", Cost: 7, Now: 1_700_000_000_123_456},
		{Rule: rule(backend.SlidingWindowCounter, 100_000, time.Hour, 0, 2*time.Hour), Key: "k", Cost: 3},
		{Rule: rule(backend.GCRA, 3, time.Second, 5, time.Second), Key: "k", Cost: 2},
	} {
		for _, op := range []lua.Op{lua.Take, lua.Peek, lua.Refund} {
			var got []string
			for _, a := range s.c.args.For(req, op) {
				got = append(got, fmt.Sprint(a))
			}
			require.Equal(t, lua.Args(req, op), got)
		}
	}
}

// A client that routes by key (a cluster, a ring) gets the first key as a
// string, which go-redis routes by; a single server's client gets pointers,
// which go-redis writes as the strings and which cost no allocation.
func TestKeysAreStringsWhereTheClientRoutesByThem(t *testing.T) {
	require.False(t, newStore(t, goredis.NewClient(&goredis.Options{})).c.routed)
	require.False(t, newStore(t, goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: "m"})).c.routed)
	require.True(t, newStore(t, goredis.NewClusterClient(&goredis.ClusterOptions{})).c.routed)
	require.True(t, newStore(t, goredis.NewRing(&goredis.RingOptions{})).c.routed)
}

// A nil client, or a replica ack out of bounds, is refused with an error.
func TestNewRefusesBadArguments(t *testing.T) {
	_, err := New(nil)
	require.ErrorIs(t, err, backend.ErrInvalidArgument)
	for _, ack := range []Option{WithReplicaAck(-1, time.Second), WithReplicaAck(1, time.Microsecond)} {
		_, err = New(goredis.NewClient(&goredis.Options{}), ack)
		require.ErrorIs(t, err, backend.ErrInvalidArgument)
	}
}

func newStore(t *testing.T, c Client) *Store {
	s, err := New(c)
	require.NoError(t, err)
	return s
}
