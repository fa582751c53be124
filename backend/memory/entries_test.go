package memory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/stretchr/testify/require"
)

// A held sliding log is decided on its record (takeHeld) when its shard has
// room for one more entry: the shard's count of entries stays the sum of
// its logs' lengths, through admissions, denials and the pruning of
// entries that left the window, and the bound holds, the shard shedding
// keys (takeIn's path) once it is reached. The store's own clock, as a
// Limiter with no clock option decides.
func TestAHeldLogKeepsTheShardsEntriesExact(t *testing.T) {
	const bound = 300
	s, err := New(WithShards(1), WithSweepInterval(0), WithMaxEntries(bound))
	require.NoError(t, err)
	defer s.Close()
	rule, err := backend.NewRule(backend.SlidingWindow, 40, 200*time.Millisecond, 0, 200*time.Millisecond, "")
	require.NoError(t, err)
	ctx := context.Background()
	sh := &s.shards[0]
	sum := func() (n int) {
		sh.log.oldest(func(ref uint32, _ int64) bool {
			n += sh.log.at(ref).st.Len()
			return true
		})
		return n
	}

	admitted, denied := 0, 0
	for round := 0; round < 20; round++ {
		for i := 0; i < 600; i++ { // 50 takes a key, past its limit of 40
			out, err := s.Take(ctx, backend.Request{Rule: rule, Key: fmt.Sprint("k", i%12), Cost: 1})
			require.NoError(t, err)
			if out.Allowed() {
				admitted++
			} else {
				denied++
			}
			sh.mu.Lock()
			entries := sh.entries
			sh.mu.Unlock()
			require.LessOrEqual(t, entries, bound, "round %d, take %d", round, i)
		}
		sh.mu.Lock()
		held, entries := sum(), sh.entries
		sh.mu.Unlock()
		require.Equal(t, held, entries, "round %d: the shard's count against its logs", round)
		time.Sleep(50 * time.Millisecond) // entries leave the window
	}
	require.Positive(t, admitted)
	require.Positive(t, denied, "50 takes a key a round, at 40 per 200ms")
	require.Positive(t, s.ActiveEvictions(), "12 keys of up to 40 entries each against a bound of %d", bound)
}
