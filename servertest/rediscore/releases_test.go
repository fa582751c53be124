package rediscore_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
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
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

func TestMain(m *testing.M) { testserver.Main(m) }

// The mixed-version harness. During a rolling upgrade, instances of the
// previous release and of this one decide the same keys; the key layout
// (keys.go, and each algorithm's file) must let this release read what the
// previous one writes, and write what it reads. testdata/releases holds,
// for every tagged release, its scripts byte for byte (a folder named by
// the tag, one file per algorithm: sliding.lua, fixed.lua, counter.lua,
// gcra.lua, as lua.For(alg).Text was), and the test below runs each
// beside this release's store. No release has been tagged yet: the folder
// is empty, and the first tag arms the harness by adding its folder. A
// release whose arguments differ from this one's says here how to make its
// predecessors'.

// release is a tagged release's scripts, by algorithm file name.
type release struct {
	tag     string
	scripts map[string]string
}

// releases are the tagged releases kept in dir (testdata/releases): none
// when it does not exist; an error for a release without the script of
// every algorithm.
func releases(dir string) ([]release, error) {
	dirs, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []release
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		r := release{tag: d.Name(), scripts: map[string]string{}}
		for _, p := range layoutPolicies {
			b, err := os.ReadFile(filepath.Join(dir, d.Name(), algFiles[p.alg]))
			if err != nil {
				return nil, fmt.Errorf("release %s keeps the script of every algorithm: %w", d.Name(), err)
			}
			r.scripts[algFiles[p.alg]] = string(b)
		}
		out = append(out, r)
	}
	return out, nil
}

// algFiles are the names of the algorithms' scripts in a kept release.
var algFiles = [...]string{backend.SlidingWindow: "sliding.lua", backend.FixedWindow: "fixed.lua",
	backend.SlidingWindowCounter: "counter.lua", backend.GCRA: "gcra.lua"}

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

// store decides through this release's Redis store.
func store(client *goredis.Client) decider {
	s, err := redis.New(client)
	if err != nil {
		panic(err) // a client is never nil here
	}
	return s.Take
}

// old decides through a script's text (another release's), with this
// release's arguments, on the keys keysOf gives.
func old(t *testing.T, client *goredis.Client, text string, keysOf func(backend.Request) []string) decider {
	sha, err := client.ScriptLoad(context.Background(), text).Result()
	require.NoError(t, err)
	return func(ctx context.Context, req backend.Request) (backend.Outcome, error) {
		cmd := client.EvalSha(ctx, sha, keysOf(req), toAny(lua.Args(req, lua.Take))...)
		if packed, err := cmd.Text(); err == nil { // this release's: packed
			return lua.Unpack(packed)
		}
		reply, err := cmd.Int64Slice() // an earlier release's: a table
		if err != nil {
			return backend.Outcome{}, err
		}
		return lua.Outcome(reply)
	}
}

// mixed sends, from 16 goroutines, 240 Takes over 4 keys of alg at one
// instant, each at random through a or b, and returns the admissions of
// each key.
func mixed(t *testing.T, a, b decider, alg backend.Algorithm, limit, burst int64) [4]int64 {
	t.Helper()
	ctx := context.Background()
	rule, err := backend.NewRule(alg, limit, time.Hour, burst, time.Hour, fmt.Sprintf("release-%d:", time.Now().UnixNano()))
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
				if out.Allowed() {
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

// TestEveryKeptReleaseSharesEveryKeyWithThisOne: during a rolling upgrade,
// a tagged release's scripts and this release's store, alternating on the
// same keys under concurrency, admit exactly the limit of each key. Two
// instances of this release do too (their clients apart).
func TestEveryKeptReleaseSharesEveryKeyWithThisOne(t *testing.T) {
	c := client(t)
	other := client(t)
	for _, p := range layoutPolicies {
		t.Run("this release twice/"+p.alg.String(), func(t *testing.T) {
			exact(t, mixed(t, store(c), store(other), p.alg, p.limit, p.burst), p.limit, p.burst)
		})
	}
	kept, err := releases("testdata/releases")
	require.NoError(t, err)
	t.Logf("%d tagged releases kept in testdata/releases", len(kept))
	beside(t, c, kept)
}

// beside runs each of kept beside this release's store (see mixed).
func beside(t *testing.T, c *goredis.Client, kept []release) {
	for _, r := range kept {
		for _, p := range layoutPolicies {
			t.Run(r.tag+"/"+p.alg.String(), func(t *testing.T) {
				prev := old(t, c, r.scripts[algFiles[p.alg]], lua.Keys)
				exact(t, mixed(t, prev, store(c), p.alg, p.limit, p.burst), p.limit, p.burst)
			})
		}
	}
}

// TestAKeptReleaseIsRun: the harness reads a release kept as the first tag
// will keep it (this release's scripts, in a folder of their own) and runs
// it; a folder that lacks a script is refused.
func TestAKeptReleaseIsRun(t *testing.T) {
	dir := t.TempDir()
	rel := filepath.Join(dir, "v0.0.0-this")
	require.NoError(t, os.Mkdir(rel, 0o755))
	for _, p := range layoutPolicies {
		require.NoError(t, os.WriteFile(filepath.Join(rel, algFiles[p.alg]), []byte(lua.For(p.alg).Text), 0o644))
	}
	kept, err := releases(dir)
	require.NoError(t, err)
	require.Len(t, kept, 1)
	require.Equal(t, "v0.0.0-this", kept[0].tag)
	beside(t, client(t), kept)

	require.NoError(t, os.Remove(filepath.Join(rel, algFiles[backend.GCRA])))
	_, err = releases(dir)
	require.Error(t, err, "a kept release without its GCRA script")
}

// TestAnIncompatibleLayoutIsCaught: the harness above fails for a release
// that does not read what another writes: this release's scripts writing
// under renamed keys, as a layout that "keeps its keys apart" would, and a
// fixed window that reads its packed numbers in another byte order. Each
// counts alone, and a key admits up to twice its limit.
func TestAnIncompatibleLayoutIsCaught(t *testing.T) {
	c := client(t)
	renamed := func(req backend.Request) []string {
		keys := lua.Keys(req)
		for i := range keys {
			keys[i] += ":v2"
		}
		return keys
	}
	for _, p := range layoutPolicies {
		t.Run(p.alg.String(), func(t *testing.T) {
			got := mixed(t, old(t, c, lua.For(p.alg).Text, renamed), store(c), p.alg, p.limit, p.burst)
			assert.True(t, over(got, p.limit, p.burst), "some key admitted over its limit: %v", got)
		})
	}
	// The same keys, a state read differently.
	text := lua.For(backend.FixedWindow).Text
	require.Equal(t, 3, strings.Count(text, "'<dd'"), "the fixed window's unpack and its two packs")
	other := strings.ReplaceAll(text, "'<dd'", "'>dd'")
	got := mixed(t, old(t, c, other, lua.Keys), store(c), backend.FixedWindow, 5, 0)
	assert.True(t, over(got, 5, 0), "some key admitted over its limit: %v", got)
}

// The scripts say which layout they keep, as keys.go's Layout does.
func TestTheScriptsCarryTheLayoutVersion(t *testing.T) {
	for _, l := range lua.Scripts() {
		assert.True(t, strings.HasPrefix(l.Text, fmt.Sprintf("-- ratelimit scripts, key layout %d ", lua.Layout)), l.SHA1)
	}
}
