package ratelimit

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
)

// hidden is a store whose concrete type the Limiter does not know: it
// decides through the backend.Store interface.
type hidden struct{ backend.Store }

// A Limiter on the memory store calls it on its concrete type (takePlain);
// its answers are those of the same store behind the interface, request for
// request, under every algorithm, with costs, clock steps and policy
// changes; and a Limiter that observes or falls back takes the whole path.
func TestTheMemoryStoresConcretePathAnswersAsTheInterface(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, alg := range Algorithms() {
		a, err := memory.New(memory.WithStoreClock(clock), memory.WithSweepInterval(0))
		require.NoError(t, err)
		b, err := memory.New(memory.WithStoreClock(clock), memory.WithSweepInterval(0))
		require.NoError(t, err)
		p := NewPolicy(alg, 10, time.Second)
		if alg == GCRA {
			p = TokenBucket(10, time.Second, 5)
		}
		direct, err := New(a, p, WithRetention(time.Minute))
		require.NoError(t, err)
		layered, err := New(hidden{b}, p, WithRetention(time.Minute))
		require.NoError(t, err)
		require.NotNil(t, direct.mem, "%v: the concrete path", alg)
		require.Nil(t, layered.mem, "%v", alg)
		for i := 0; i < 3000; i++ {
			key := string(rune('a' + rng.IntN(3)))
			n := 1 + rng.IntN(3)
			switch rng.IntN(20) {
			case 0:
				q := p
				q.Limit = 1 + rng.IntN(20)
				if alg == GCRA {
					q.Burst = 1 + rng.IntN(10)
				}
				require.NoError(t, direct.SetPolicy(q))
				require.NoError(t, layered.SetPolicy(q))
			case 1:
				n = 1000 // over the limit: refused, the same way
			}
			now = now.Add(time.Duration(rng.IntN(150)) * time.Millisecond)
			got, errGot := direct.AllowN(ctx, key, n)
			want, errWant := layered.AllowN(ctx, key, n)
			require.Equal(t, errWant != nil, errGot != nil, "%v, call %d: %v against %v", alg, i, errGot, errWant)
			if errWant != nil {
				require.ErrorIs(t, errGot, ErrInvalidCost)
			}
			require.Equal(t, want, got, "%v, call %d", alg, i)
			d, err := direct.Allow(ctx, key)
			require.NoError(t, err)
			w, err := layered.Allow(ctx, key)
			require.NoError(t, err)
			require.Equal(t, w, d, "%v, call %d: Allow", alg, i)
		}
		observed, err := New(a, p, WithObserver(ObserverFunc(func(context.Context, Event) {})))
		require.NoError(t, err)
		require.Nil(t, observed.mem, "an observed Limiter takes the whole path")
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
	}
}
