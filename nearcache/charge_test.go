package nearcache_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
)

// Charges through the cache, one or several together (ChargeAll), forget
// the keys' cached denials: a denial is still one after a charge, but its
// count and its wait are no longer the store's, and the next request asks.
func TestAChargeForgetsTheCachedDenial(t *testing.T) {
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	s := cached(t, m)
	ctx := context.Background()
	var limiters []*ratelimit.Limiter
	for _, prefix := range []string{"a:", "b:"} {
		l, err := ratelimit.New(s, ratelimit.PerMinute(2), ratelimit.WithPrefix(prefix))
		require.NoError(t, err)
		limiters = append(limiters, l)
	}
	multi, err := ratelimit.NewMulti(limiters...)
	require.NoError(t, err)
	keys := []string{"user", "user"}
	for _, c := range []struct {
		charge  func() error
		charged []bool // by policy
	}{
		{func() error { _, err := limiters[0].Charge(ctx, "user", 3); return err }, []bool{true, false}},
		{func() error { _, err := multi.ChargeN(ctx, keys, 3); return err }, []bool{true, true}},
	} {
		for _, l := range limiters {
			for range 3 {
				_, err := l.Allow(ctx, "user")
				require.NoError(t, err)
			}
		}
		require.Equal(t, 2, s.Len(), "both denials cached")
		require.NoError(t, c.charge())
		for i, l := range limiters {
			misses := s.Misses()
			d, err := l.Allow(ctx, "user")
			require.NoError(t, err)
			require.False(t, d.Allowed)
			require.Equal(t, c.charged[i], s.Misses() == misses+1, "policy %d: asked the store if charged, else answered", i)
			want, err := l.Peek(ctx, "user")
			require.NoError(t, err)
			require.Equal(t, want.Count, d.Count, "policy %d: the store's count", i)
		}
		for _, l := range limiters {
			require.NoError(t, l.Reset(ctx, "user"))
		}
	}
}
