package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/guard"
)

// A decision of the fallback reaches a caller of the store itself as what
// it is: the primary's failure (an error wrapping ErrStore and the cause),
// beside the fallback's decision under this instance's share of each rule,
// named by the *backend.Fallback; never as an answer of the primary.
func TestTheFallbacksDecisionComesBesideTheFailure(t *testing.T) {
	primary := &flaky{Store: newMemory(t)}
	primary.down.Store(true)
	s, err := guard.New(primary, guard.WithFallback(newMemory(t), 4), guard.WithFailures(100)) // the breaker stays closed
	require.NoError(t, err)
	perMinute, err := backend.NewRule(backend.FixedWindow, 20, time.Minute, 0, time.Minute, "m:")
	require.NoError(t, err)
	perHour, err := backend.NewRule(backend.GCRA, 100, time.Hour, 40, time.Hour, "h:")
	require.NoError(t, err)
	ctx := context.Background()

	out, err := s.Take(ctx, backend.Request{Rule: perMinute, Key: "k", Cost: 1})
	var fb *backend.Fallback
	require.ErrorAs(t, err, &fb)
	require.ErrorIs(t, err, backend.ErrStore)
	require.ErrorIs(t, err, errGone, "the primary's failure is the cause")
	require.Len(t, fb.Rules, 1)
	require.Equal(t, int64(5), fb.Rules[0].MaxCost(), "a quarter of 20")
	require.True(t, out.Allowed())
	require.Equal(t, int64(1), out.Count)

	outs := make([]backend.Outcome, 2)
	err = s.TakeAll(ctx, []backend.Request{{Rule: perMinute, Key: "k", Cost: 1}, {Rule: perHour, Key: "k", Cost: 2}}, outs)
	require.ErrorAs(t, err, &fb)
	require.Len(t, fb.Rules, 2, "a rule for each request")
	require.Equal(t, []int64{5, 10}, []int64{fb.Rules[0].MaxCost(), fb.Rules[1].MaxCost()}, "a quarter of the limit, of GCRA's burst")
	require.Equal(t, []int64{2, 2}, []int64{outs[0].Count, outs[1].Count})

	// Several peeks (PeekAll) are the fallback's too, each under its share,
	// and record nothing.
	for range 2 {
		err = s.PeekAll(ctx, []backend.Request{{Rule: perMinute, Key: "k", Cost: 1}, {Rule: perHour, Key: "k", Cost: 1}}, outs)
		require.ErrorAs(t, err, &fb)
		require.ErrorIs(t, err, backend.ErrStore)
		require.Len(t, fb.Rules, 2, "a rule for each request")
		require.Equal(t, []int64{5, 10}, []int64{fb.Rules[0].MaxCost(), fb.Rules[1].MaxCost()})
		require.Equal(t, []int64{2, 2}, []int64{outs[0].Count, outs[1].Count}, "what the takes left, nothing more")
	}

	// Several charges (ChargeAll) are the fallback's too, each under its
	// share, a charge past the share's MaxCost (and the rule's) included.
	err = s.ChargeAll(ctx, []backend.Request{{Rule: perMinute, Key: "c", Cost: 30}, {Rule: perHour, Key: "c", Cost: 1}}, outs)
	require.ErrorAs(t, err, &fb)
	require.ErrorIs(t, err, backend.ErrStore)
	require.Len(t, fb.Rules, 2, "a rule for each request")
	require.Equal(t, []int64{5, 10}, []int64{fb.Rules[0].MaxCost(), fb.Rules[1].MaxCost()})
	require.Equal(t, []int64{30, 1}, []int64{outs[0].Count, outs[1].Count}, "each charged its cost")
	require.Equal(t, []bool{false, true}, []bool{outs[0].Allowed(), outs[1].Allowed()}, "30 past a share of 5; 1 within 10")

	// The Limiter makes of it the fallback's Decision, and no error.
	l, err := ratelimit.New(s, ratelimit.NewPolicy(ratelimit.FixedWindow, 20, time.Minute), ratelimit.WithPrefix("m:"))
	require.NoError(t, err)
	d, err := l.Allow(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, ratelimit.SourceFallback, d.Source)
	require.Equal(t, 5, d.Limit)
	require.Equal(t, 3, d.Count)
	d, err = l.Refund(ctx, "k", 1)
	require.NoError(t, err)
	require.Equal(t, ratelimit.SourceFallback, d.Source, "a refund the fallback made")
	require.Equal(t, 2, d.Count)

	// A healthy primary's answer carries no such error.
	primary.down.Store(false)
	_, err = s.Take(ctx, backend.Request{Rule: perMinute, Key: "k", Cost: 1})
	require.False(t, errors.As(err, &fb), "%v", err)
}

// A request is validated once, by the store that decides it: the guard
// passes bad input on and takes the store's refusal as its answer, neither
// a success nor a failure of the store, and with the breaker open the
// fallback refuses it alike; it is never the fallback's decision.
func TestBadInputIsTheStoresToRefuse(t *testing.T) {
	primary := &flaky{Store: newMemory(t)}
	s, err := guard.New(primary, guard.WithFailures(2), guard.WithFallback(newMemory(t), 2))
	require.NoError(t, err)
	rule, err := backend.NewRule(backend.FixedWindow, 10, time.Minute, 0, time.Minute, "")
	require.NoError(t, err)
	bad := map[string]struct {
		req  backend.Request
		want error
	}{
		"an empty key":     {backend.Request{Rule: rule, Cost: 1}, backend.ErrInvalidKey},
		"cost 0":           {backend.Request{Rule: rule, Key: "k"}, backend.ErrInvalidCost},
		"over the limit":   {backend.Request{Rule: rule, Key: "k", Cost: 11}, backend.ErrInvalidCost},
		"before the epoch": {backend.Request{Rule: rule, Key: "k", Cost: 1, Now: -5}, backend.ErrInvalidArgument},
		"no rule":          {backend.Request{Key: "k", Cost: 1}, backend.ErrInvalidArgument},
	}
	ctx := context.Background()
	refuse := func(state string) {
		for name, c := range bad {
			for range 3 { // more than the failures that open the breaker
				_, err := s.Take(ctx, c.req)
				require.ErrorIs(t, err, c.want, "%s: %s", state, name)
				require.False(t, errors.Is(err, backend.ErrStore), "%s: %s is no failure: %v", state, name, err)
				outs := make([]backend.Outcome, 1)
				require.ErrorIs(t, s.TakeAll(ctx, []backend.Request{c.req}, outs), c.want, "%s: %s, TakeAll", state, name)
			}
		}
	}
	refuse("the primary up")
	require.Equal(t, guard.Closed, s.State(), "refusals are no failures")
	out, err := s.Peek(ctx, backend.Request{Rule: rule, Key: "k", Cost: 1})
	require.NoError(t, err)
	require.Zero(t, out.Count, "nothing was recorded")

	primary.down.Store(true)
	for range 2 {
		_, err := s.Take(ctx, backend.Request{Rule: rule, Key: "k", Cost: 1})
		require.ErrorIs(t, err, backend.ErrStore)
	}
	require.Equal(t, guard.Open, s.State())
	refuse("the breaker open")
}
