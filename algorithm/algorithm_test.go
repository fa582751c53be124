package algorithm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const ms = int64(1000) // µs

func TestLogFollowsTheRules(t *testing.T) {
	// limit 3 per 100ms; each step is (time in ms, cost; 0 = a peek of cost 1) and what must come out.
	steps := []struct {
		name              string
		at, cost          int64
		allowed           bool
		count             int
		resetAt, retryAft int64 // ms
	}{
		{"peek on an empty log", 0, 0, true, 0, 0, 0},
		{"first request", 0, 1, true, 1, 100, 0},
		{"two at once", 10, 2, true, 3, 100, 0},
		{"over the limit: waits for the oldest to leave", 50, 1, false, 3, 100, 50},
		{"cost 2 waits for the second oldest", 60, 2, false, 3, 100, 50},
		{"the oldest left exactly at its time+window", 100, 1, true, 3, 110, 0},
		{"peek denied", 105, 0, false, 3, 110, 5},
		{"both entries of t=10 leave together", 110, 2, true, 3, 200, 0},
		{"a whole window later everything has left", 300, 0, true, 0, 300, 0},
	}
	var l Log
	for _, s := range steps {
		out := takeOrPeek(l.Take, l.Peek, s.at*ms, 100*ms, 3, int(s.cost))
		want := Outcome{Allowed: s.allowed, Count: s.count, ResetAt: s.resetAt * ms, RetryAfter: s.retryAft * ms, At: s.at * ms}
		assert.Equal(t, want, out, s.name)
	}
}

func TestLogKeepsOutOfOrderRequestsSorted(t *testing.T) {
	var l Log
	for _, at := range []int64{50, 40, 60, 45} {
		require.True(t, l.Take(at*ms, 100*ms, 10, 1).Allowed)
	}
	assert.Equal(t, []int64{40 * ms, 45 * ms, 50 * ms, 60 * ms}, l.buf[l.head:])
	out := l.Take(146*ms, 100*ms, 10, 0)
	assert.Equal(t, 2, out.Count, "40 and 45 have left at 146")
	assert.Equal(t, 150*ms, out.ResetAt)
}

func TestCounterFollowsTheRules(t *testing.T) {
	steps := []struct {
		name               string
		at, cost           int64
		allowed            bool
		count              int
		resetAt, retryAftr int64 // ms
	}{
		{"peek before any window", 5, 0, true, 0, 100, 0},
		{"first", 5, 2, true, 2, 100, 0},
		{"fills the window", 99, 1, true, 3, 100, 0},
		{"denied until the window ends", 99, 1, false, 3, 100, 1},
		{"a new window at the boundary", 100, 3, true, 3, 200, 0},
		{"a late request counts in the newest window", 50, 1, false, 3, 200, 150},
		{"skipping windows", 730, 1, true, 1, 800, 0},
	}
	var c Counter
	for _, s := range steps {
		out := takeOrPeek(c.Take, c.Peek, s.at*ms, 100*ms, 3, int(s.cost))
		want := Outcome{Allowed: s.allowed, Count: s.count, ResetAt: s.resetAt * ms, RetryAfter: s.retryAftr * ms, At: s.at * ms}
		assert.Equal(t, want, out, s.name)
	}
}

func TestWindowStartBeforeTheEpoch(t *testing.T) {
	assert.Equal(t, int64(-100), WindowStart(-1, 100))
	assert.Equal(t, int64(0), WindowStart(0, 100))
	assert.Equal(t, int64(100), WindowStart(199, 100))
}

type decideFunc func(now, window int64, limit, n int) Outcome

// takeOrPeek is a Take of cost, or a Peek of cost 1 when cost is 0.
func takeOrPeek(take, peek decideFunc, now, window int64, limit, cost int) Outcome {
	if cost == 0 {
		return peek(now, window, limit, 1)
	}
	return take(now, window, limit, cost)
}
