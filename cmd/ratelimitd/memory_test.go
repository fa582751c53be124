package main

import (
	"context"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/service"
)

// floodAfterALimitedUser limits user "victim" (5 an hour), then sends a
// flood of requests on distinct users (two each) through a memory store built from o,
// and says whether the victim is admitted again, and how many flood
// requests the store refused.
func floodAfterALimitedUser(t *testing.T, o options) (victimAdmitted bool, refused int) {
	st, err := openStore("memory", o, nil, slog.Default())
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	cfg, err := config.Parse("rules.yaml", []byte(withUser))
	require.NoError(t, err)
	svc, err := service.New(st.top, cfg, service.Options{})
	require.NoError(t, err)
	ctx := context.Background()
	ask := func(user string) (service.Result, error) {
		return svc.Decide(ctx, service.Request{Domain: "api", Descriptors: []service.Descriptor{
			{Entries: []config.Entry{{Key: "user", Value: user}}}}})
	}
	for i := 0; i < 6; i++ {
		res, err := ask("victim")
		require.NoError(t, err)
		require.Equal(t, i >= 5, res.OverLimit, "request %d", i+1)
	}
	for i := 0; i < 20*o.maxKeys; i++ {
		for range 2 { // keys used once go first; these are used twice
			if _, err := ask("flood-" + strconv.Itoa(i)); err != nil {
				require.ErrorIs(t, err, memory.ErrFull)
				refused++
			}
		}
	}
	res, err := ask("victim")
	require.NoError(t, err)
	return !res.OverLimit, refused
}

// -max-keys bounds the memory store, and -when-full says what a flood of
// new keys does to a key inside its window: evict it (it gets its quota
// again) or be refused (the key keeps its count). A flood of ~900,000
// distinct values once evicted a client at 5 a day, admitted 5 more the
// same day, and ratelimitd had no flag for either.
func TestTheMemoryStoresBoundAndFullBehaviourAreFlags(t *testing.T) {
	o, err := parseFlags([]string{"-config", "c.yaml", "-max-keys", "256", "-when-full", "refuse"}, env(nil), nil)
	require.NoError(t, err)
	admitted, refused := floodAfterALimitedUser(t, o)
	assert.False(t, admitted, "refuse: the victim keeps its count")
	assert.Positive(t, refused, "refuse: the flood's new keys are refused")

	o.refuseWhenFull = false
	admitted, refused = floodAfterALimitedUser(t, o)
	assert.True(t, admitted, "evict: the flood evicted the victim, which got its quota again")
	assert.Zero(t, refused)

	_, err = parseFlags([]string{"-config", "c.yaml", "-when-full", "drop"}, env(nil), nil)
	require.ErrorIs(t, err, errUsage)
}

// A client's descriptor values are kept as their hash once long: 10,000
// descriptors of 4 KiB each (the memory store's default bound is 100,000
// keys) once held 40 MB of keys, and took ratelimitd to 870 MB at the
// bound.
func TestLongDescriptorsCostLittleMemory(t *testing.T) {
	o, err := parseFlags([]string{"-config", "c.yaml"}, env(nil), nil)
	require.NoError(t, err)
	st, err := openStore("memory", o, nil, slog.Default())
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	cfg, err := config.Parse("rules.yaml", []byte(withUser))
	require.NoError(t, err)
	svc, err := service.New(st.top, cfg, service.Options{})
	require.NoError(t, err)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	value := []byte(strings.Repeat("x", 4000))
	const n = 10_000
	for i := 0; i < n; i++ {
		copy(value, strconv.Itoa(i)+":")
		_, err := svc.Decide(context.Background(), service.Request{Domain: "api", Descriptors: []service.Descriptor{
			{Entries: []config.Entry{{Key: "user", Value: string(value)}}}}})
		require.NoError(t, err)
	}
	grown := int64(heap()) - int64(before)
	t.Logf("%d descriptors of 4 KiB: the heap grew by %d bytes, %d a key", n, grown, grown/n)
	assert.Less(t, grown, int64(n*500), "a key's state costs far less than its 4 KiB")
}
