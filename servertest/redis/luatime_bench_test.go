package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/rediscore"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// The scripts' own Lua, apart from the commands they call: one EVAL runs
// a function's body luaCalls times over a stand-in for redis.call whose
// replies lead it down one path (a state read, a write acknowledged), and
// reports the Lua's time a call (lua-ns/op). The server's own time in a
// decision is this, the commands' (INFO commandstats) and the call's
// dispatch; INFO cannot tell the first from the last, this can, to a few
// percent between runs. (`go run ./bench/peers -scripts` runs the scripts
// in a loop too, with their commands on real keys: the server's whole cost
// a decision, beside redis_rate's; this leaves the commands out.)
//
//	go test -run - -bench LuasOwnTime ./servertest/redis
func BenchmarkLuasOwnTime(b *testing.B) {
	srv := testserver.Own(b, testserver.Redis)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer c.Close()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for _, p := range luaPaths(now) {
		b.Run(p.name, func(b *testing.B) {
			var ns float64
			for range b.N {
				r, err := c.Eval(context.Background(), p.script, p.keys, p.args...).Text()
				if err != nil {
					b.Fatal(err)
				}
				if ns, err = strconv.ParseFloat(r, 64); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(ns, "lua-ns/op")
		})
	}
}

// luaCalls is the calls of a function's body in one EVAL.
const luaCalls = 20_000

// luaPath is one path through a script: the EVAL that times it.
type luaPath struct {
	name, script string
	keys         []string
	args         []any
}

// luaStub stands in for redis.call and redis.pcall: GET answers the
// state v (or v2 every other call, so that nothing a script keeps of its
// last read is reused), ZREMRANGEBYSCORE removes `removed`, ZRANGE finds
// an entry at `oldest`, every write succeeds.
const luaStub = `local real = redis
local v, v2, removed, oldest
local redis = {REDIS_VERSION_NUM = real.REDIS_VERSION_NUM}
local flip = false
local replies = {
  GET = function() flip = not flip if flip then return v end return v2 end,
  SET = function() return {ok = 'OK'} end, DEL = function() return 1 end,
  ZADD = function() return 1 end, PEXPIRE = function() return 1 end,
  ZREMRANGEBYSCORE = function() return removed end, ZCARD = function() return 2 end,
  ZRANGE = function() return {'1', oldest} end, TIME = function() return {'0', '0'} end,
}
redis.call = function(cmd, ...) return replies[cmd](...) end
redis.pcall = redis.call
`

// luaLoop times body (a function of KEYS and ARGV answering a table),
// after the library's top and the stub's set-up.
func luaLoop(top, body, setup string) string {
	return luaStub + top + "local function timed_body(KEYS, ARGV)\n" + body + "end\n" + setup +
		"local t0 = real.call('TIME')\nfor _ = 1, " + strconv.Itoa(luaCalls) + " do timed_body(KEYS, ARGV) end\n" +
		"local t1 = real.call('TIME')\nreturn tostring(((t1[1] - t0[1]) * 1e6 + (t1[2] - t0[2])) * 1000 / " + strconv.Itoa(luaCalls) + ")\n"
}

// luaPaths are the paths timed: a take on a sorted-set log (limit 10,000
// in 10 ms) whose meta tells it stale with one entry or two, with entries
// in the window, or with some to prune; a fixed window's denial; and All's
// three fixed windows denied together (three rules of one limit, as
// ratelimitd's descriptors often are), each on the store's estimate of
// the server's clock.
func luaPaths(now int64) []luaPath {
	var paths []luaPath
	meta := func(newest, oldest, entries int64) string {
		return fmt.Sprintf("struct.pack('<dddddd', %%d, 0, %d, %d, %d, %d)", newest, oldest, now/1000+500, entries)
	}
	add := func(name string, alg backend.Algorithm, reqs []backend.Request, state, setup string) {
		top, body := lua.FunctionParts(alg)
		var keys []string
		var args []string
		if len(reqs) == 1 {
			keys, args = lua.Keys(reqs[0]), lua.Args(reqs[0], lua.Take)
			args[lua.NowArg] = strconv.FormatInt(lua.Estimated(now), 10)
		} else {
			var err error
			if keys, err = rediscore.KeysAll(reqs, true); err != nil {
				panic(err) // constant requests
			}
			args = lua.NewStringArgs().ForAllAt(reqs, lua.Take, now)
			body = strings.TrimPrefix(lua.All.Text, top)
		}
		v, v2 := state, state
		if strings.Contains(state, "%d") { // a meta: its n differs
			v, v2 = fmt.Sprintf(state, 7), fmt.Sprintf(state, 8)
		}
		setup += "v = " + v + "\nv2 = " + v2 + "\n"
		p := luaPath{name: name, script: luaLoop(top, body, setup), keys: keys}
		for _, a := range args {
			p.args = append(p.args, a)
		}
		paths = append(paths, p)
	}
	log := request(backend.SlidingWindow, 10_000, 10*time.Millisecond, "log:")
	const ms = 1000
	add("sliding/stale-one-entry", backend.SlidingWindow, log, meta(now-20*ms, now-20*ms, 1), "removed = 1\n")
	add("sliding/stale-two-entries", backend.SlidingWindow, log, meta(now-20*ms, now-25*ms, 2), "removed = 2\n")
	add("sliding/in-the-window", backend.SlidingWindow, log, meta(now-2*ms, now-5*ms, 2), "removed = 0\n")
	add("sliding/prune-one-of-two", backend.SlidingWindow, log, meta(now-2*ms, now-15*ms, 2), "removed = 1\n")
	add("sliding/prune-two-of-four", backend.SlidingWindow, log, meta(now-2*ms, now-15*ms, 4),
		fmt.Sprintf("removed = 2\noldest = '%d'\n", now-3*ms))
	window := now - now%time.Hour.Microseconds()
	fixed := fmt.Sprintf("struct.pack('<dd', %d, 10)", window) // denied: 10 of 10
	add("fixed/denied", backend.FixedWindow, request(backend.FixedWindow, 10, time.Hour, "fw:"), fixed, "")
	var three []backend.Request
	for i := range 3 {
		three = append(three, request(backend.FixedWindow, 10, time.Hour, fmt.Sprintf("fw%d:", i))...)
	}
	add("all/three-fixed-denied", backend.FixedWindow, three, fixed, "")
	return paths
}

// request is one request on key "k" under a rule of alg.
func request(alg backend.Algorithm, limit int64, window time.Duration, prefix string) []backend.Request {
	rule, err := backend.NewRule(alg, limit, window, 0, window, prefix)
	if err != nil {
		panic(err) // constant rules
	}
	return []backend.Request{{Rule: rule, Key: "k", Cost: 1}}
}
