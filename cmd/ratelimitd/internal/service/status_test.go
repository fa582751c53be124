package service

import (
	"context"
	"fmt"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/internal/counted"
	"github.com/ratelimit-go/ratelimit/nearcache"
)

// timingOut fails every Take as a store whose time budget ran out does.
type timingOut struct{ backend.Store }

func (timingOut) Take(context.Context, backend.Request) (backend.Outcome, error) {
	return backend.Outcome{}, fmt.Errorf("%w: %w", backend.ErrStore, context.DeadlineExceeded)
}

// Every failure of the store is Unavailable, its timeouts included (with
// -no-guard and the store down, 35% of calls were DeadlineExceeded where
// the docs say Unavailable); the caller's own end keeps its code.
func TestEveryStoreFailureIsUnavailable(t *testing.T) {
	m, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	svc, _ := newService(t, rules, timingOut{m})
	rls := NewRLS(svc)
	in := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}}}}}
	_, err = rls.ShouldRateLimit(context.Background(), in)
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)

	gone, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = rls.ShouldRateLimit(gone, in)
	assert.Equal(t, codes.Canceled, status.Code(err), "%v", err)
}

// When the near cache answers one descriptor's denial, the statuses of the
// others, which it did not ask, are peeked in one call of the store (one
// round trip on a server): they were peeked one by one, a round trip each
// (three descriptors a request ran at 0.84x envoyproxy/ratelimit's rate).
// Each status is still its own.
func TestUnaskedStatusesArePeekedInOneCall(t *testing.T) {
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	store := counted.New(m)
	cache, err := nearcache.New(store)
	require.NoError(t, err)
	svc, _ := newService(t, rules, cache)
	r := req(desc("user", "alice"), desc("site", "s1"), desc("log", "x"))
	for i := 1; i <= 3; i++ {
		require.False(t, decide(t, svc, r).OverLimit, "request %d", i)
	}
	res := decide(t, svc, r) // the store's denial, cached
	require.True(t, res.OverLimit)
	peeks, peekAlls := store.Peeks.Load(), store.PeekAlls.Load()
	res = decide(t, svc, r) // the cache's
	over, per := verdicts(res)
	assert.True(t, over)
	assert.Equal(t, []bool{true, false, false}, per)
	assert.Equal(t, 7, res.Statuses[1].Decision.Remaining, "site: 10 a minute, 3 taken")
	assert.Equal(t, 1, res.Statuses[2].Decision.Remaining, "log: 4 in 10 s, 3 taken")
	assert.Equal(t, int64(1), store.PeekAlls.Load()-peekAlls, "one PeekAll")
	assert.Equal(t, peeks, store.Peeks.Load(), "and no Peek")
}
