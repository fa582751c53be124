package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
)

// The Decision floor answers as Limiter.Allow on the memory store under
// GCRA: the same admissions, counts and limits, and times on its own clock
// that agree with the Limiter's to within the time the calls took (a reset
// time rests on when the calls before it were made). A floor
// that answered less would bound nothing.
func TestTheDecisionFloorAnswersAsTheLimiter(t *testing.T) {
	for _, p := range []struct {
		limit  int
		window time.Duration
	}{{5, time.Hour}, {3, 90 * time.Millisecond}, {7, 24 * time.Hour}} {
		store, err := memory.New()
		require.NoError(t, err)
		defer store.Close()
		l, err := ratelimit.New(store, ratelimit.NewPolicy(ratelimit.GCRA, p.limit, p.window))
		require.NoError(t, err)
		f := newDecisionGCRA(p.limit, p.window)
		began := time.Now()
		for i := range p.limit + 3 {
			want, err := l.Allow(context.Background(), "k")
			require.NoError(t, err)
			var got ratelimit.Decision
			f.decide("k", &got)
			spread := time.Since(began) + 2*time.Microsecond // and a µs of rounding each
			msg := []any{"%d per %v, call %d: %+v against %+v", p.limit, p.window, i, got, want}
			require.Equal(t, want.Allowed, got.Allowed, msg...)
			require.Equal(t, want.Limit, got.Limit, msg...)
			require.Equal(t, want.Count, got.Count, msg...)
			require.Equal(t, want.Remaining, got.Remaining, msg...)
			require.Equal(t, want.Source, got.Source, msg...)
			require.WithinDuration(t, want.At, got.At, spread, msg...)
			require.WithinDuration(t, want.ResetAt, got.ResetAt, spread, msg...)
			require.InDelta(t, want.RetryAfter, got.RetryAfter, float64(spread), msg...)
		}
	}
}
