package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/internal/counted"
)

// withoutPeekAll is a store that cannot peek at several requests together.
type withoutPeekAll struct{ backend.Store }

func (withoutPeekAll) PeekAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) error {
	return backend.Unimplemented{}.PeekAll(ctx, reqs, outs)
}

// Multi.Peek asks a store that peeks at several requests in one call once
// (ratelimitd's statuses of unasked descriptors: a round trip each, before
// PeekAll), and one by one a store that cannot; the answers are each
// Limiter's own Peek either way.
func TestMultiPeekIsOneCall(t *testing.T) {
	for _, noPeekAll := range []bool{false, true} {
		m, err := memory.New()
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		var next backend.Store = m
		if noPeekAll {
			next = withoutPeekAll{m}
		}
		s := counted.New(next)
		var limiters []*ratelimit.Limiter
		for i, p := range []ratelimit.Policy{ratelimit.PerMinute(3), ratelimit.PerHour(10), ratelimit.TokenBucket(5, time.Second, 5)} {
			l, err := ratelimit.New(s, p, ratelimit.WithPrefix(string(rune('a'+i))+":"))
			require.NoError(t, err)
			limiters = append(limiters, l)
		}
		multi, err := ratelimit.NewMulti(limiters...)
		require.NoError(t, err)
		ctx, keys := context.Background(), []string{"ip", "user", "tenant"}
		for range 3 {
			_, err := multi.Allow(ctx, keys...)
			require.NoError(t, err)
		}
		one := s.Peeks.Load()
		md, err := multi.Peek(ctx, keys...)
		require.NoError(t, err)
		require.False(t, md.Allowed, "per minute is spent")
		if noPeekAll {
			require.EqualValues(t, 3, s.Peeks.Load()-one, "one by one")
		} else {
			require.EqualValues(t, 1, s.PeekAlls.Load(), "one call")
			require.Equal(t, one, s.Peeks.Load(), "and no Peek")
		}
		for i, l := range limiters {
			d, err := l.Peek(ctx, keys[i])
			require.NoError(t, err)
			require.Equal(t, d.Count, md.Decisions[i].Count, "policy %d", i)
			require.Equal(t, d.Allowed, md.Decisions[i].Allowed, "policy %d", i)
			require.Equal(t, d.Remaining, md.Decisions[i].Remaining, "policy %d", i)
		}
		require.Equal(t, []int{3, 3, 3}, []int{md.Decisions[0].Count, md.Decisions[1].Count, md.Decisions[2].Count})
		_, err = multi.Peek(ctx, "only", "two")
		require.ErrorIs(t, err, ratelimit.ErrInvalidArgument)
		require.False(t, errors.Is(err, errors.ErrUnsupported))
	}
}
