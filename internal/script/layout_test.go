package script_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/redis"
	"github.com/ratelimit-go/ratelimit/internal/script"
	"github.com/ratelimit-go/ratelimit/internal/testserver"
)

func TestMain(m *testing.M) { testserver.Main(m) }

// previous is the script of the previous release, byte for byte
// (testdata/previous.lua: its algorithms.lua and decide.lua, from git), of
// layout 1. During a rolling upgrade its instances decide the same keys as
// this release's; the state layout (keys.go, and each algorithm's file)
// must let both read what the other wrote.
func previous(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/previous.lua")
	require.NoError(t, err)
	return string(b)
}

// layoutPolicies are one policy per algorithm, each admitting 5 at one
// instant.
var layoutPolicies = []struct {
	alg          backend.Algorithm
	limit, burst int64
}{
	{backend.SlidingWindow, 5, 0},
	{backend.FixedWindow, 5, 0},
	{backend.SlidingWindowCounter, 5, 0},
	{backend.GCRA, 1, 5},
}

// decider decides a Take: through a store, or through a script.
type decider func(ctx context.Context, req backend.Request) (backend.Outcome, error)

// store decides through this release's Redis store writing layout.
func store(client *goredis.Client, layout int) decider {
	return redis.New(client, redis.WithLayout(layout)).Take
}

// old decides through the script text (the previous release's), on the keys
// oldKeys gives, with its arguments: this release's writing layout 1, less
// the layout.
func old(t *testing.T, client *goredis.Client, text string, oldKeys func(backend.Request) []string) decider {
	sha, err := client.ScriptLoad(context.Background(), text).Result()
	require.NoError(t, err)
	return func(ctx context.Context, req backend.Request) (backend.Outcome, error) {
		args := script.Args(req, script.Take, 1)
		args = append(args[:1], args[2:]...) // it took the slack, then the request's
		reply, err := client.EvalSha(ctx, sha, oldKeys(req), toAny(args)...).Int64Slice()
		if err != nil {
			return backend.Outcome{}, err
		}
		return script.Outcome(reply)
	}
}

// layout1Keys are the keys of req's state in layout 1: the previous
// release's.
func layout1Keys(req backend.Request) []string {
	keys := script.Keys(req)
	if req.Rule.Algorithm() != backend.SlidingWindow {
		return keys[1:] // the layout 2 key, then the layout 1 key
	}
	return keys
}

// mixed sends, from 16 goroutines, 240 Takes over 4 keys of alg at one
// instant, each at random through a or b, and returns the admissions of
// each key.
func mixed(t *testing.T, a, b decider, alg backend.Algorithm, limit, burst int64) [4]int64 {
	t.Helper()
	ctx := context.Background()
	rule, err := backend.NewRule(alg, limit, time.Hour, burst, time.Hour, fmt.Sprintf("layout-%d:", time.Now().UnixNano()))
	require.NoError(t, err)
	now := time.Date(2026, 11, 23, 12, 30, 0, 0, time.UTC).UnixMicro() // inside an hour's window: no boundary
	var admitted [4]atomic.Int64
	var failures atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := 0; i < 15; i++ {
				k := rng.IntN(4)
				req := backend.Request{Rule: rule, Key: fmt.Sprint("k", k), Cost: 1, Now: now}
				decide := a
				if rng.IntN(2) == 0 {
					decide = b
				}
				out, err := decide(ctx, req)
				if err != nil {
					failures.Add(1)
					first.CompareAndSwap(nil, err.Error())
					continue
				}
				if out.Allowed {
					admitted[k].Add(1)
				}
			}
		}(g)
	}
	wg.Wait()
	require.Zero(t, failures.Load(), "first: %v", first.Load())
	var out [4]int64
	for k := range out {
		out[k] = admitted[k].Load()
	}
	return out
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func client(t *testing.T) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: testserver.Get(t, testserver.Redis).Addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// exact asserts that every key admitted its limit, no more, no less.
func exact(t *testing.T, got [4]int64, limit, burst int64) {
	t.Helper()
	for k, n := range got {
		assert.Equal(t, max(limit, burst), n, "key %d: admitted by both together", k)
	}
}

// over says whether some key admitted more than its limit.
func over(got [4]int64, limit, burst int64) bool {
	for _, n := range got {
		if n > max(limit, burst) {
			return true
		}
	}
	return false
}

// TestThePreviousReleaseAndThisOneShareEveryKey: during a rolling upgrade,
// the previous release's script and this release's store writing its
// default layout, alternating on the same keys under concurrency, admit
// exactly the limit of each key.
func TestThePreviousReleaseAndThisOneShareEveryKey(t *testing.T) {
	c := client(t)
	prev := old(t, c, previous(t), layout1Keys)
	for _, p := range layoutPolicies {
		t.Run(p.alg.String(), func(t *testing.T) {
			exact(t, mixed(t, prev, store(c, script.DefaultLayout), p.alg, p.limit, p.burst), p.limit, p.burst)
		})
	}
}

// TestInstancesWritingEitherLayoutShareEveryKey: while a deployment of this
// release moves from writing layout 1 to writing layout 2, instances of
// both kinds, alternating on the same keys under concurrency, admit exactly
// the limit of each key.
func TestInstancesWritingEitherLayoutShareEveryKey(t *testing.T) {
	c := client(t)
	for _, p := range layoutPolicies {
		t.Run(p.alg.String(), func(t *testing.T) {
			exact(t, mixed(t, store(c, 1), store(c, 2), p.alg, p.limit, p.burst), p.limit, p.burst)
		})
	}
}

// TestAnIncompatibleLayoutIsCaught: the mixed-version test above fails for
// a layout the previous release does not read: this release writing layout
// 2 beside it (which is why layout 1 is the default, and layout 2 waits
// until no instance of the previous release runs), and the previous release
// writing under renamed keys, as a layout that "keeps its keys apart"
// would. Each counts alone, and a key admits up to twice its limit.
func TestAnIncompatibleLayoutIsCaught(t *testing.T) {
	c, text := client(t), previous(t)
	renamed := func(req backend.Request) []string {
		keys := layout1Keys(req)
		for i := range keys {
			keys[i] += ":v0"
		}
		return keys
	}
	for _, p := range layoutPolicies {
		t.Run(p.alg.String(), func(t *testing.T) {
			got := mixed(t, old(t, c, text, renamed), store(c, script.DefaultLayout), p.alg, p.limit, p.burst)
			assert.True(t, over(got, p.limit, p.burst), "some key admitted over its limit: %v", got)
			if p.alg == backend.SlidingWindow {
				return // layout 2 keeps the log as layout 1 did
			}
			got = mixed(t, old(t, c, text, layout1Keys), store(c, 2), p.alg, p.limit, p.burst)
			assert.True(t, over(got, p.limit, p.burst), "writing layout 2 beside the previous release: %v", got)
		})
	}
	// The same keys, a state read differently: the fixed window's count
	// under another field.
	other := strings.ReplaceAll(text, "'c'", "'n'")
	require.Equal(t, 2, strings.Count(text, "'c'"), "the fixed window's HMGET and HSET of its count")
	got := mixed(t, old(t, c, other, layout1Keys), store(c, script.DefaultLayout), backend.FixedWindow, 5, 0)
	assert.True(t, over(got, 5, 0), "some key admitted over its limit: %v", got)
}

// The scripts say which layout they keep, as keys.go's Layout does.
func TestTheScriptsCarryTheLayoutVersion(t *testing.T) {
	for _, l := range script.Scripts() {
		assert.True(t, strings.HasPrefix(l.Text, fmt.Sprintf("-- Layout %d of the keys", script.Layout)), l.SHA1)
	}
}
