package backend_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/owner"
)

// A policy outside its bounds is no rule, and says why with its sentinel.
func TestNewRuleRefusesWhatNoStoreDecidesExactly(t *testing.T) {
	for _, c := range []struct {
		name         string
		alg          backend.Algorithm
		limit, burst int64
		window, keep time.Duration
		prefix       string
		want         error
	}{
		{"limit 0", backend.FixedWindow, 0, 0, time.Second, time.Second, "", backend.ErrInvalidPolicy},
		{"a log over MaxLogLimit", backend.SlidingWindow, backend.MaxLogLimit + 1, 0, time.Second, time.Second, "", backend.ErrInvalidPolicy},
		{"a window under 1ms", backend.FixedWindow, 1, 0, time.Millisecond - 1, time.Second, "", backend.ErrInvalidPolicy},
		{"a burst on a window algorithm", backend.FixedWindow, 1, 2, time.Second, time.Second, "", backend.ErrInvalidPolicy},
		{"GCRA without a burst", backend.GCRA, 1, 0, time.Second, time.Second, "", backend.ErrInvalidPolicy},
		{"a GCRA queue too long", backend.GCRA, 1, 522, backend.MaxWindow, backend.MaxWindow, "", backend.ErrInvalidPolicy},
		{"an unknown algorithm", 9, 1, 0, time.Second, time.Second, "", backend.ErrInvalidPolicy},
		{"a retention under the window", backend.FixedWindow, 1, 0, time.Second, time.Second - 1, "", backend.ErrInvalidArgument},
		{"a prefix too long", backend.FixedWindow, 1, 0, time.Second, time.Second, string(make([]byte, backend.MaxPrefixLen+1)), backend.ErrInvalidKey},
	} {
		r, err := backend.NewRule(c.alg, c.limit, c.window, c.burst, c.keep, c.prefix)
		require.ErrorIs(t, err, c.want, c.name)
		require.Nil(t, r, c.name)
	}
	r, err := backend.NewRule(backend.GCRA, 1, backend.MaxWindow, 521, backend.MaxWindow, "p:")
	require.NoError(t, err, "the largest burst at that rate")
	require.Equal(t, int64(521), r.MaxCost())
	require.Equal(t, "p:", r.Prefix())
	require.Equal(t, backend.GCRA, r.Algorithm())
}

// A request no store can decide is refused before any store sees it.
func TestRequestValidate(t *testing.T) {
	r, err := backend.NewRule(backend.FixedWindow, 5, time.Second, 0, time.Second, "")
	require.NoError(t, err)
	ok := backend.Request{Rule: r, Key: "k", Cost: 5, Now: backend.MaxMicros}
	require.NoError(t, ok.Validate())
	for name, c := range map[string]struct {
		req  backend.Request
		want error
	}{
		"no rule":          {backend.Request{Key: "k", Cost: 1}, backend.ErrInvalidArgument},
		"cost 0":           {backend.Request{Rule: r, Key: "k"}, backend.ErrInvalidCost},
		"over MaxCost":     {backend.Request{Rule: r, Key: "k", Cost: 6}, backend.ErrInvalidCost},
		"an empty key":     {backend.Request{Rule: r, Cost: 1}, backend.ErrInvalidKey},
		"before the epoch": {backend.Request{Rule: r, Key: "k", Cost: 1, Now: -1}, backend.ErrInvalidArgument},
		"after MaxMicros":  {backend.Request{Rule: r, Key: "k", Cost: 1, Now: backend.MaxMicros + 1}, backend.ErrInvalidArgument},
	} {
		require.ErrorIs(t, c.req.Validate(), c.want, name)
	}
	require.ErrorIs(t, backend.Unsupported("mystore", backend.GCRA), errors.ErrUnsupported)
}

// A rule keeps what each owner made of it, made once however many ask at
// once, for as many owners as a Limiter's layers have.
func TestRuleOwnMakesOncePerOwner(t *testing.T) {
	r, err := backend.NewRule(backend.FixedWindow, 5, time.Second, 0, time.Second, "")
	require.NoError(t, err)
	owners := make([]*owner.Key, 4)
	var built atomic.Int64
	var wg sync.WaitGroup
	for i := range owners {
		owners[i] = owner.New()
	}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				for i, o := range owners {
					v := r.Own(o, func(*backend.Rule) any { built.Add(1); return i })
					if v != i {
						t.Errorf("owner %d got %v", i, v)
					}
				}
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, built.Load(), int64(8*len(owners)), "made once per owner, but for callers that raced")
	built.Store(0)
	for range 3 {
		require.Equal(t, 7, r.Own(nil, func(*backend.Rule) any { built.Add(1); return 7 }))
	}
	require.Equal(t, int64(3), built.Load(), "a nil key keeps nothing")
}
