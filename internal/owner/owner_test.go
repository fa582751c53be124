package owner_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/owner"
)

// Every owner finds its own value, the first with First, every one with
// Get; past the bound, the oldest are forgotten and made again, never
// another's returned.
func TestValuesKeepEachOwnersOwn(t *testing.T) {
	var vs owner.Values
	keys := make([]*owner.Key, 12)
	for i := range keys {
		keys[i] = owner.New()
		_, ok := vs.Get(keys[i])
		require.False(t, ok, "nothing before Put")
		require.Equal(t, i, vs.Put(keys[i], i))
		v, ok := vs.First(keys[i])
		require.True(t, ok, "the newest owner is first")
		require.Equal(t, i, v)
	}
	kept := 0
	for i, k := range keys {
		if v, ok := vs.Get(k); ok {
			require.Equal(t, i, v)
			kept++
		}
	}
	require.Equal(t, 8, kept, "a few owners are kept")
	require.Equal(t, 11, vs.Put(keys[11], 99), "a second Put keeps the first value")
	require.Equal(t, 5, vs.Put(nil, 5))
	_, ok := vs.Get(nil)
	require.False(t, ok, "a nil key keeps nothing")
	_, ok = vs.First(nil)
	require.False(t, ok)
}
