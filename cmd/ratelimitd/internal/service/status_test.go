package service

import (
	"context"
	"fmt"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
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
