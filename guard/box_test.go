package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/conformance"
	"github.com/ratelimit-go/ratelimit/guard"
)

// The local share keeps the rule's penalty box: a key the fallback denies
// while the primary is down stays denied for the box, not the window (a
// share made with NewRule from the rule's numbers dropped it).
func TestTheLocalShareKeepsThePenaltyBox(t *testing.T) {
	primary := boxing{&flaky{Store: newMemory(t)}}
	primary.down.Store(true)
	s, err := guard.New(primary, guard.WithFailures(1), guard.WithFallback(newMemory(t), 1))
	require.NoError(t, err)
	require.True(t, s.Info().Blocks, "both keep boxes")
	clock := conformance.NewManualClock(time.Unix(1_800_000_000, 0))
	l, err := ratelimit.New(s, ratelimit.PerSecond(2).BlockFor(time.Hour), ratelimit.WithCallerClock(clock.Now))
	require.NoError(t, err)
	ctx := context.Background()
	for range 2 {
		d, err := l.Allow(ctx, "k")
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	d, err := l.Allow(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, ratelimit.SourceFallback, d.Source)
	require.Equal(t, time.Hour, d.RetryAfter, "boxed")
	clock.Advance(time.Minute)
	d, err = l.Allow(ctx, "k")
	require.NoError(t, err)
	require.False(t, d.Allowed, "still boxed, a minute on")

	none, err := guard.New(primary, guard.WithFallback(noBoxes{newMemory(t)}, 1))
	require.NoError(t, err)
	require.False(t, none.Info().Blocks, "a fallback without boxes")
	_, err = ratelimit.New(none, ratelimit.PerSecond(2).BlockFor(time.Hour))
	require.ErrorIs(t, err, errors.ErrUnsupported)
}

// boxing is a flaky server that keeps penalty boxes.
type boxing struct{ *flaky }

func (boxing) Info() backend.Info { return backend.Info{Blocks: true} }

// noBoxes is a store that keeps no penalty boxes.
type noBoxes struct{ *memory.Store }

func (noBoxes) Info() backend.Info { return backend.Info{InProcess: true} }
