package nearcache_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/conformance"
	"github.com/ratelimit-go/ratelimit/internal/counted"
	"github.com/ratelimit-go/ratelimit/nearcache"
)

// A cache of size keys keeps a key asked for at least once every size/2
// denials learned, however many others come and go, and holds no more than
// size: hits read the LRU without moving the key, and the key is moved to
// its front before it can reach the back.
func TestAKeyAskedForOftenStaysCachedWhileOthersLeave(t *testing.T) {
	const size = 8
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	store := counted.New(m)
	s, err := nearcache.New(store, nearcache.WithSize(size))
	require.NoError(t, err)
	clock := conformance.NewManualClock(time.Unix(1_800_000_000, 0))
	l, err := ratelimit.New(s, ratelimit.PerHour(1), ratelimit.WithCallerClock(clock.Now))
	require.NoError(t, err)
	ctx := context.Background()
	deny := func(key string) { // admitted, then denied: the denial cached
		for i, want := range []bool{true, false} {
			d, err := l.Allow(ctx, key)
			require.NoError(t, err)
			require.Equal(t, want, d.Allowed, "%s, request %d", key, i)
		}
	}
	deny("hot")
	for i := range 20 * size {
		deny(fmt.Sprint("cold-", i))
		require.LessOrEqual(t, s.Len(), size, "after %d keys", i)
		if i%(size/2) == size/2-1 {
			takes := store.Takes.Load()
			d, err := l.Allow(ctx, "hot")
			require.NoError(t, err)
			require.False(t, d.Allowed)
			require.Equal(t, takes, store.Takes.Load(), "after %d other keys, hot's denial is the cache's", i+1)
		}
	}
	require.Equal(t, size, s.Len(), "the keys asked for once left for the new ones")
	takes := store.Takes.Load()
	_, err = l.Allow(ctx, "cold-0")
	require.NoError(t, err)
	require.Equal(t, takes+1, store.Takes.Load(), "the least recently used left: the store decides it again")
}
