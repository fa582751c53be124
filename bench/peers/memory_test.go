package main

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The memory store's O(1) algorithms hold a key in at most the bytes
// sethvargo/go-limiter's store does, both measured in this run: the heap a
// contender grows by for keys it holds (their strings are the test's, shared
// by both), after a GC. The store held 160 bytes a key (1.5x) when each key
// was an entry of its own in a Go map.
func TestBytesPerKeyWithinGoLimiters(t *testing.T) {
	const n = 20_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	perKey := map[string]float64{}
	for _, m := range memoryMakers() {
		if m.peer && !strings.HasPrefix(m.name, "sethvargo") {
			continue
		}
		heap := func() uint64 {
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			return ms.HeapAlloc
		}
		before := heap()
		c, err := m.open(100, time.Hour, "")
		require.NoError(t, err)
		for _, k := range keys {
			_, err := c.allow(context.Background(), k)
			require.NoError(t, err)
		}
		perKey[m.name] = float64(int64(heap())-int64(before)) / n
		runtime.KeepAlive(c)
		c.close()
	}
	ref := perKey["sethvargo/go-limiter memorystore"]
	require.Positive(t, ref)
	for name, b := range perKey {
		t.Logf("%s: %.0f bytes per key, %.2fx go-limiter's", name, b, b/ref)
		if strings.Contains(name, "sliding") || name == "sethvargo/go-limiter memorystore" {
			continue // a log keeps an entry per request in the window
		}
		require.LessOrEqual(t, b/ref, 1.0, "%s: bytes per key against go-limiter's", name)
	}
}
