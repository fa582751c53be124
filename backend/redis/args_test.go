package redis

import (
	"fmt"
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

// A key in place is a string to every reader: a type switch (go-redis's
// writer and its cluster routing), fmt, equality; and boxing it allocates
// nothing.
func TestAKeyInPlaceIsAString(t *testing.T) {
	key := "rl:{api:user-1}:s"
	v := inPlace(&key)
	s, ok := v.(string)
	require.True(t, ok)
	require.Equal(t, key, s)
	require.Equal(t, any(key), v)
	require.Equal(t, key, fmt.Sprint(v))
	require.Zero(t, testing.AllocsPerRun(100, func() { v = inPlace(&key) }))
}
