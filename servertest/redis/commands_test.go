package redis_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
	"github.com/ratelimit-go/ratelimit/servertest/serverinfo"
	"github.com/ratelimit-go/ratelimit/servertest/storetest"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// What a decision costs: the commands it sends, FCALL or EVALSHA, and its
// allocations.

func commandStats(t *testing.T, c *goredis.Client) map[string]int64 {
	calls, err := serverinfo.CommandCalls(context.Background(), c)
	require.NoError(t, err)
	return calls
}

// countingHook counts the commands the client sends (each of a pipeline)
// for decisions: not the store's readings of the server's clock (TIME,
// about one a second whatever the decisions: rediscore's clock.go), nor
// the handshake of a connection the pool opens meanwhile for a decision
// (HELLO, CLIENT SETINFO).
type countingHook struct{ n atomic.Int64 }

// notDecisions are the commands countingHook does not count.
var notDecisions = map[string]bool{"time": true, "hello": true, "client": true}

func (h *countingHook) count(cmd goredis.Cmder) {
	if !notDecisions[cmd.Name()] {
		h.n.Add(1)
	}
}

func (h *countingHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *countingHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error { h.count(cmd); return next(ctx, cmd) }
}
func (h *countingHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func TestOneDecisionIsOneCommand(t *testing.T) {
	c, admin := client(t), client(t)
	hook := &countingHook{}
	c.AddHook(hook)
	ctx := context.Background()
	for _, alg := range backend.Algorithms() {
		l := newLimiter(t, store(t, c), ratelimit.NewPolicy(alg, 5, time.Minute))
		_, err := l.Allow(ctx, "warm-up") // loads the functions once (FCALL, FUNCTION LOAD, FCALL)
		require.NoError(t, err)
		const decisions = 20
		before, sent := commandStats(t, admin), hook.n.Load()
		for i := 0; i < decisions; i++ {
			_, err := l.Allow(ctx, "user")
			require.NoError(t, err)
		}
		after := commandStats(t, admin)
		require.Equal(t, int64(decisions), hook.n.Load()-sent, "%v: commands sent by the client", alg)
		require.Equal(t, int64(decisions), after["fcall"]-before["fcall"], "%v: FCALL calls on the server", alg)
		require.Equal(t, before["evalsha"]+before["eval"], after["evalsha"]+after["eval"], "%v: no script once the functions are loaded", alg)
	}
}

// Several policies on one caller's key are one script: Multi asks the store
// to decide them together, so a denial by one takes nothing from the others
// even under races (the one-by-one path's peek-then-take could over-count).
func TestMultiOnOneKeyIsOneCommand(t *testing.T) {
	c := client(t)
	hook := &countingHook{}
	c.AddHook(hook)
	ctx := context.Background()
	store := store(t, c)
	perSecond := newLimiter(t, store, ratelimit.PerSecond(2), ratelimit.WithPrefix(prefix(t)+"s:"), ratelimit.WithName("per-second"))
	perHour := newLimiter(t, store, ratelimit.Policy{Limit: 100, Window: time.Hour, Algorithm: ratelimit.FixedWindow}, ratelimit.WithPrefix(prefix(t)+"h:"))
	m, err := ratelimit.NewMulti(perSecond, perHour)
	require.NoError(t, err)
	_, err = m.Allow(ctx, "warm-up", "warm-up") // loads the script
	require.NoError(t, err)
	sent := hook.n.Load()
	for i := 1; i <= 3; i++ {
		d, err := m.Allow(ctx, "user", "user")
		require.NoError(t, err)
		require.Equal(t, i <= 2, d.Allowed, "request %d", i)
	}
	require.Equal(t, int64(3), hook.n.Load()-sent, "one command per Multi decision")
	d, err := perHour.Peek(ctx, "user")
	require.NoError(t, err)
	require.Equal(t, 2, d.Count, "the denial took nothing from per-hour")
}

// A decision through go-redis made 17 to 19 allocations (go-redis's Script
// boxed every argument and every integer of the reply). The store sends its
// own command: the command with its words and keys (one allocation), the
// keys' text (one), and go-redis's own four (its check of the connection it
// takes from its pool, three; the reply's slice). The store is measured
// alone: the Limiter's time budget adds one, and a timer per millisecond
// of deadlines, which a loaded machine's slow calls make once per call.
func TestAllocationsPerDecision(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	s := store(t, client(t))
	for _, alg := range backend.Algorithms() {
		// A deadline, as the Limiter's budget gives, and within the
		// client's read timeout (else the store caps it: four more).
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req := backend.Request{Rule: ruleOf(t, fmt.Sprintf("allocs:%d:", time.Now().UnixNano()), ratelimit.NewPolicy(alg, 10_000, time.Minute)),
			Key: "user", Cost: 1}
		_, err := s.Take(ctx, req) // the connection, and the script (NOSCRIPT, then EVAL)
		require.NoError(t, err)
		allocs := testing.AllocsPerRun(200, func() {
			if _, err := s.Take(ctx, req); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("%v: %.0f allocations per decision", alg, allocs)
		require.LessOrEqual(t, allocs, 6.0, "%v: the call, the keys' text, and go-redis's own four", alg)
	}
}

// A server with functions runs each decision as one FCALL; one without (as
// before Redis 7), as one EVALSHA.
func TestFunctionsWhereTheServerHasThem(t *testing.T) {
	storetest.Functions(t, testserver.Redis, func(t *testing.T, addr string) backend.Store {
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		t.Cleanup(func() { _ = c.Close() })
		return store(t, c)
	})
}

// A charge, a refund and an undo publish their news (so that other
// instances' near caches forget the key) from their own script, after the
// change: one command each. They were two, the script then a PUBLISH:
// under ratelimitd's -count-over-limit, six commands a request of three
// descriptors, and 0.32x envoyproxy/ratelimit's rate. A listener hears
// each, and a refused refund, which changes nothing, tells nothing.
func TestAChangeIsOneCommandAndIsHeard(t *testing.T) {
	c, hook, heard := listened(t)
	ctx := context.Background()
	for _, alg := range backend.Algorithms() {
		l := newLimiter(t, store(t, c), ratelimit.NewPolicy(alg, 5, time.Minute), ratelimit.WithPrefix(prefix(t)+alg.String()+":"))
		d, err := l.Allow(ctx, "user") // loads the functions
		require.NoError(t, err)
		want := lua.News(prefix(t)+alg.String()+":", "user")
		for _, op := range []struct {
			name string
			do   func() error
		}{
			{"Charge", func() error { _, err := l.Charge(ctx, "user", 2); return err }},
			{"Refund", func() error { _, err := l.Refund(ctx, "user", 1); return err }},
			{"Undo", func() error { _, err := l.Undo(ctx, "user", 1, d); return err }},
		} {
			sent := hook.n.Load()
			require.NoError(t, op.do(), "%v: %s", alg, op.name)
			require.EqualValues(t, 1, hook.n.Load()-sent, "%v: %s is one command", alg, op.name)
			require.Equal(t, want, heard(op.name), "%v: %s's news", alg, op.name)
		}
		_, err = l.Refund(ctx, "user", 100) // more than held: refused
		require.ErrorIs(t, err, ratelimit.ErrInvalidCost)
	}
	// The refused refunds told nothing: each next news was the next
	// algorithm's charge, and the last one's is a Reset's.
	require.NoError(t, store(t, c).Reset(ctx, "after:", "x"))
	require.Equal(t, lua.News("after:", "x"), heard("Reset"))
}

// A Multi's charge of several policies (a response's tokens, each policy
// charged whatever its quota) is one command, where it was one a policy:
// one call of All charges every request and publishes the news of each
// change, in the requests' order, for other instances' near caches.
func TestAMultiChargeIsOneCommandAndEachChargeIsHeard(t *testing.T) {
	c, hook, heard := listened(t)
	ctx := context.Background()
	s := store(t, c)
	var limiters []*ratelimit.Limiter
	var news []string
	for _, alg := range backend.Algorithms() {
		p := prefix(t) + alg.String() + ":"
		limiters = append(limiters, newLimiter(t, s, ratelimit.NewPolicy(alg, 5, time.Minute), ratelimit.WithPrefix(p)))
		news = append(news, lua.News(p, "user"))
	}
	m, err := ratelimit.NewMulti(limiters...)
	require.NoError(t, err)
	keys := []string{"user", "user", "user", "user"}
	_, err = m.Allow(ctx, keys...) // loads the functions
	require.NoError(t, err)
	sent := hook.n.Load()
	md, err := m.ChargeN(ctx, keys, 3)
	require.NoError(t, err)
	require.EqualValues(t, 1, hook.n.Load()-sent, "one command for %d charges", len(keys))
	require.True(t, md.Allowed, "1 and 3 of 5: the charge fits every policy")
	for i, d := range md.Decisions {
		require.Equal(t, 4, d.Count, "%v: the take and the charge", limiters[i].Policy())
	}
	for i, want := range news {
		require.Equal(t, want, heard(fmt.Sprint("charge ", i)), "charge %d", i)
	}
}

// listened is a client whose commands hook counts, and heard, which
// returns the next news on the channel of changes (what names it in a
// failure).
func listened(t *testing.T) (c *goredis.Client, hook *countingHook, heard func(what string) string) {
	c, listener := client(t), client(t)
	hook = &countingHook{}
	c.AddHook(hook)
	ctx := context.Background()
	ps := listener.Subscribe(ctx, lua.Channel)
	t.Cleanup(func() { _ = ps.Close() })
	_, err := ps.Receive(ctx) // the subscription's confirmation
	require.NoError(t, err)
	return c, hook, func(what string) string {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		msg, err := ps.ReceiveMessage(rctx)
		require.NoError(t, err, "%s: no news", what)
		return msg.Payload
	}
}

// A decision of three keys (a Multi's, ratelimitd's request of three
// descriptors) makes 13 allocations, the client's call waited on in a
// goroutine of its own included (go-redis without ContextTimeoutEnabled).
// Its keys go to go-redis as pointers, as a single decision's do: boxed as
// strings, one allocation each, it made 17.
func TestAllocationsPerDecisionOfThreeKeys(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	s := store(t, client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var reqs []backend.Request
	for i := range 3 {
		reqs = append(reqs, backend.Request{Rule: ruleOf(t, fmt.Sprintf("allocs3:%d:%d:", i, time.Now().UnixNano()),
			ratelimit.NewPolicy(backend.FixedWindow, 10_000, time.Minute)), Key: "user", Cost: 1})
	}
	outs := make([]backend.Outcome, len(reqs))
	require.NoError(t, s.TakeAll(ctx, reqs, outs)) // the connection, and the script
	allocs := testing.AllocsPerRun(200, func() {
		if err := s.TakeAll(ctx, reqs, outs); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%.0f allocations per decision of three keys", allocs)
	require.LessOrEqual(t, allocs, 13.0)
}
