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
// (testdata/previous.lua: its algorithms.lua and decide.lua, from git).
// During a rolling upgrade its instances decide the same keys as this
// release's; the state layout (keys.go, and each algorithm's file) must
// let both read what the other wrote.
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

// mixed sends, from 16 goroutines, 240 Takes over 4 keys of alg at one
// instant, each at random through this release's store or through old (the
// previous release's script, on the keys oldKeys gives), and returns the
// admissions of each key.
func mixed(t *testing.T, client *goredis.Client, old string, alg backend.Algorithm, limit, burst int64, oldKeys func(backend.Request) []string) [4]int64 {
	t.Helper()
	ctx := context.Background()
	rule, err := backend.NewRule(alg, limit, time.Hour, burst, time.Hour, fmt.Sprintf("layout-%d:", time.Now().UnixNano()))
	require.NoError(t, err)
	store := redis.New(client)
	now := time.Date(2026, 11, 23, 12, 30, 0, 0, time.UTC).UnixMicro() // inside an hour's window: no boundary
	oldSHA, err := client.ScriptLoad(ctx, old).Result()
	require.NoError(t, err)
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
				var out backend.Outcome
				var err error
				if rng.IntN(2) == 0 {
					out, err = store.Take(ctx, req)
				} else {
					var reply []int64
					reply, err = client.EvalSha(ctx, oldSHA, oldKeys(req), toAny(script.Args(req, script.Take))...).Int64Slice()
					if err == nil {
						out, err = script.Outcome(reply)
					}
				}
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

// TestThePreviousReleaseAndThisOneShareEveryKey: during a rolling upgrade,
// the previous release's script and this release's store, alternating on
// the same keys under concurrency, admit exactly the limit of each key.
func TestThePreviousReleaseAndThisOneShareEveryKey(t *testing.T) {
	c, old := client(t), previous(t)
	for _, p := range layoutPolicies {
		t.Run(p.alg.String(), func(t *testing.T) {
			got := mixed(t, c, old, p.alg, p.limit, p.burst, script.Keys)
			for k, n := range got {
				assert.Equal(t, max(p.limit, p.burst), n, "key %d: admitted by both releases together", k)
			}
		})
	}
}

// TestAnIncompatibleLayoutIsCaught: the mixed-version test above fails for
// a release whose keys are not the previous release's (the old script here
// writes under renamed keys, as a layout that "keeps its keys apart"
// would): each release counts alone, and a key admits up to twice its
// limit. Keeping keys apart is no safe upgrade.
func TestAnIncompatibleLayoutIsCaught(t *testing.T) {
	c, old := client(t), previous(t)
	renamed := func(req backend.Request) []string {
		keys := script.Keys(req)
		for i := range keys {
			keys[i] += ":v0"
		}
		return keys
	}
	for _, p := range layoutPolicies {
		t.Run(p.alg.String(), func(t *testing.T) {
			got := mixed(t, c, old, p.alg, p.limit, p.burst, renamed)
			over := false
			for _, n := range got {
				over = over || n > max(p.limit, p.burst)
			}
			assert.True(t, over, "some key admitted over its limit: %v", got)
		})
	}
	// The same keys, a state read differently: the fixed window's count
	// under another field.
	other := strings.ReplaceAll(old, "'c'", "'n'")
	require.Equal(t, 2, strings.Count(old, "'c'"), "the fixed window's HMGET and HSET of its count")
	got := mixed(t, c, other, backend.FixedWindow, 5, 0, script.Keys)
	assert.Greater(t, max(got[0], got[1], got[2], got[3]), int64(5), "some key admitted over its limit: %v", got)
}

// The scripts say which layout they keep, as keys.go's Layout does.
func TestTheScriptsCarryTheLayoutVersion(t *testing.T) {
	for _, l := range script.Scripts() {
		assert.True(t, strings.HasPrefix(l.Text, fmt.Sprintf("-- Layout %d of the keys", script.Layout)), l.SHA1)
	}
}
