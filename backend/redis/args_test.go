package redis

import (
	"fmt"

	goredis "github.com/redis/go-redis/v9"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/script"
)

// The arguments go-redis formats are those of the script's convention.
func TestArgsAreTheScriptsConvention(t *testing.T) {
	s := New(nil)
	for _, req := range []ratelimit.Request{
		{Policy: ratelimit.PerMinute(100), Cost: 1},
		{Policy: ratelimit.Policy{Limit: 7, Window: 1500 * time.Microsecond, Algorithm: ratelimit.FixedWindow}, Cost: 7,
			Clock: ratelimit.CallerClock, Now: time.UnixMicro(1_700_000_000_123_456)},
		{Policy: ratelimit.Policy{Limit: 100_000, Window: time.Hour, Algorithm: ratelimit.SlidingWindowCounter}, Cost: 3, Retain: 2 * time.Hour},
		{Policy: ratelimit.TokenBucket(3, time.Second, 5), Cost: 2},
	} {
		for _, op := range []script.Op{script.Take, script.Peek, script.Refund} {
			var got []string
			for _, a := range s.args.For(req, op) {
				got = append(got, fmt.Sprint(a))
			}
			require.Equal(t, script.Args(req, op), got)
		}
	}
}

// A client that routes by key (a cluster, a ring) gets the first key as a
// string, which go-redis routes by; a single server's client gets pointers,
// which go-redis writes as the strings and which cost no allocation.
func TestKeysAreStringsWhereTheClientRoutesByThem(t *testing.T) {
	require.False(t, New(goredis.NewClient(&goredis.Options{})).routed)
	require.False(t, New(goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: "m"})).routed)
	require.True(t, New(goredis.NewClusterClient(&goredis.ClusterOptions{})).routed)
	require.True(t, New(goredis.NewRing(&goredis.RingOptions{})).routed)
}
