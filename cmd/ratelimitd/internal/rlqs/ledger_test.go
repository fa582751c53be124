package rlqs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The memory ledger drops a bucket once no plane is known on it (all
// silent for two TTLs, their holds ended): a stream of ever new bucket ids
// leaves it holding those of its last two TTLs, not all.
func TestTheMemoryLedgerDropsIdleBuckets(t *testing.T) {
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	l := NewMemoryLedger(func() time.Time { return now }).(*memoryLedger)
	ctx := context.Background()
	for i := range 1000 {
		_, err := l.Grant(ctx, fmt.Sprint("bucket-", i), time.Second, 100, ttl, "plane", 10)
		require.NoError(t, err)
		now = now.Add(step / 10)
	}
	require.Less(t, len(l.buckets), 60, "the buckets of the last two TTLs and a hold, not 1,000")
	require.Greater(t, len(l.buckets), 20, "a live plane's buckets stay")
}

// A bucket counts MaxPlanes planes at most: one more is granted nothing
// and not recorded, so that a report's work stays bounded.
func TestTheMemoryLedgerCountsMaxPlanesABucket(t *testing.T) {
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	l := NewMemoryLedger(func() time.Time { return now }).(*memoryLedger)
	ctx := context.Background()
	for i := range MaxPlanes {
		_, err := l.Grant(ctx, "b", time.Second, 1_000_000, ttl, fmt.Sprint("plane-", i), 10)
		require.NoError(t, err)
	}
	g, err := l.Grant(ctx, "b", time.Second, 1_000_000, ttl, "one-more", 10)
	require.NoError(t, err)
	require.Zero(t, g)
	require.Len(t, l.buckets["b"].alloc.planes, MaxPlanes)
	g, err = l.Grant(ctx, "b", time.Second, 1_000_000, ttl, "plane-0", 10)
	require.NoError(t, err)
	require.Positive(t, g, "a known plane is still granted")
}
