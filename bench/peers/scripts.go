package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
)

// The scripts' own cost (-scripts): each script's text runs loopRuns times
// inside one EVAL, on loopKeys keys in turn, so the client, the network and
// the parsing of a command stay out: the call's time over loopRuns is what
// the script itself costs the server per decision. The limit is loopLimit
// per loopWindow, so that in the call's 50-100 ms every key sees windows
// pass: requests admitted and denied, state pruned and expired, as a busy
// server's keys do. The scripts take
// turns, round after round, and each one's fastest round is reported: a
// descheduled server only ever adds time, and on a shared machine it adds a
// lot (2x between rounds here), where the fastest rounds agree.

// loopRuns is the decisions of one round of one script.
const loopRuns = 5000

// The load of the loop: each key's requests, at loopRuns/loopKeys per call,
// run at several times the limit.
const (
	loopKeys   = 100
	loopLimit  = 20
	loopWindow = 10 * time.Millisecond
)

// loopKey marks, in a key, where the loop puts the run's key.
const loopKey = "@ID@"

// loopLua runs the text (a script's body, as a function) ARGV[1] times,
// each on the keys ARGV[3..2+ARGV[2]] with loopKey replaced by one of 1,000
// ids, and the rest of ARGV as the script's arguments. The top text runs
// once, before: a function library's, outside its functions.
const loopLua = `%s
local function run(KEYS, ARGV)
%s
end
local n, nk = tonumber(ARGV[1]), tonumber(ARGV[2])
local patterns, argv = {}, {}
for i = 1, nk do patterns[i] = ARGV[2 + i] end
for i = 3 + nk, #ARGV do argv[#argv + 1] = ARGV[i] end
for i = 1, n do
  local id, keys = tostring(i %% %d), {}
  for j = 1, nk do keys[j] = (string.gsub(patterns[j], '@ID@', id)) end
  run(keys, argv)
end
return n`

// loopScript is one script to measure: its text, keys and arguments.
type loopScript struct {
	name string
	top  string // run once, before (a library's top)
	text string
	keys []string
	args []string
}

// loopScripts are the references (return 1, a minimal fixed window,
// go-redis/redis_rate's GCRA) and this library's scripts, at loopLimit per
// loopWindow: each as EVALSHA runs it (the whole text a call) and as FCALL
// runs its function (the library's top once).
func loopScripts(rateText string) []loopScript {
	limit, ms := strconv.Itoa(loopLimit), strconv.FormatInt(loopWindow.Milliseconds(), 10)
	ls := []loopScript{
		{name: "a script of return 1", text: "return 1", keys: []string{"floor:" + loopKey}},
		{name: "a minimal fixed window (INCR, PEXPIRE)", text: minimalFixed, keys: []string{"min:" + loopKey}, args: []string{ms}},
		// burst, rate, period (s), cost
		{name: redisRate, text: rateText, keys: []string{"rr:" + loopKey}, args: []string{limit, limit, strconv.FormatFloat(loopWindow.Seconds(), 'f', -1, 64), "1"}},
	}
	for _, alg := range backend.Algorithms() {
		burst := int64(0)
		if alg == ratelimit.GCRA {
			burst = loopLimit
		}
		rule, err := backend.NewRule(alg, loopLimit, loopWindow, burst, loopWindow, "ours:")
		if err != nil {
			panic(err) // a constant policy
		}
		req := backend.Request{Rule: rule, Key: loopKey, Cost: 1}
		top, body := lua.FunctionParts(alg)
		ls = append(ls,
			loopScript{name: "ratelimit " + alg.String() + " (EVALSHA)", text: lua.For(alg).Text,
				keys: lua.Keys(req), args: lua.Args(req, lua.Take)},
			loopScript{name: "ratelimit " + alg.String() + " (FCALL)", top: top, text: body,
				keys: lua.Keys(req), args: lua.Args(req, lua.Take)})
	}
	return ls
}

const redisRate = "go-redis/redis_rate (GCRA)"

// minimalFixed is the least a fixed window can be: a count that expires
// with its window, no clock read and nothing else answered (a floor row
// here and in the network scenario).
const minimalFixed = `local c = redis.call('INCR', KEYS[1])
if c == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return c`

// timedFixed is the least a fixed window on the server's clock can be: the
// commands of ours and of redis_rate's GCRA (TIME, GET, and SET on an
// admission), a state of two doubles, and no other work (no validation of
// what is stored, no skew, no retention, no reset in the answer). Ours
// sends the same commands: what it costs the server above this row is its
// own Lua. ARGV: the window (ms) and the limit.
const timedFixed = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window, limit = tonumber(ARGV[1]) * 1000, tonumber(ARGV[2])
local v = redis.call('GET', KEYS[1])
local start, count = 0, 0
if v and #v == 16 then start, count = struct.unpack('<dd', v) end
local ws = now - math.fmod(now, window)
if ws > start then start, count = ws, 0 end
if count >= limit then return limit + 1 end
count = count + 1
redis.call('SET', KEYS[1], struct.pack('<dd', start, count), 'PX', tostring(math.floor((start + window - now + 999) / 1000)))
return count`

// redisRateScript is go-redis/redis_rate's GCRA script (its allowN), read
// from the module's source in the module cache: the library does not
// export it, and a copy here would not be the peer's.
func redisRateScript() (string, error) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", errors.New("no build information")
	}
	const path = "github.com/go-redis/redis_rate/v10"
	version := ""
	for _, d := range info.Deps {
		if d.Path == path {
			version = d.Version
		}
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil || version == "" {
		return "", fmt.Errorf("locating %s's source (go env GOMODCACHE: %v)", path, err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), path+"@"+version, "lua.go"))
	if err != nil {
		return "", err
	}
	_, text, ok := strings.Cut(string(src), "var allowN = redis.NewScript(`")
	text, _, ok2 := strings.Cut(text, "`)")
	if !ok || !ok2 {
		return "", fmt.Errorf("%s@%s: no allowN script in lua.go", path, version)
	}
	return text, nil
}

// runScripts measures loopScripts on the server at addr, rounds times each,
// and prints the fastest round of each, with its ratio to redis_rate's.
func runScripts(addr string, rounds int, out, progress io.Writer) error {
	rateText, err := redisRateScript()
	if err != nil {
		return err
	}
	c := goredis.NewClient(&goredis.Options{Addr: addr, ReadTimeout: time.Minute})
	defer c.Close()
	ctx := context.Background()
	ls := loopScripts(rateText)
	best := make([]time.Duration, len(ls))
	for r := range rounds {
		fmt.Fprintf(progress, "scripts: round %d/%d\n", r+1, rounds)
		for j := range ls {
			i := (j + r) % len(ls)
			d, err := loopOnce(ctx, c, ls[i])
			if err != nil {
				return fmt.Errorf("%s: %w", ls[i].name, err)
			}
			if best[i] == 0 || d < best[i] {
				best[i] = d
			}
		}
	}
	ref := best[slices.IndexFunc(ls, func(l loopScript) bool { return l.name == redisRate })]
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(out, "\nthe scripts' own time on the server: %d decisions in one EVAL over %d keys at %d per %v, fastest of %d rounds\n",
		loopRuns, loopKeys, loopLimit, loopWindow, rounds)
	fmt.Fprintln(w, "script\tµs/decision\tvs redis_rate\t")
	for i, l := range ls {
		us := float64(best[i].Nanoseconds()) / 1000 / loopRuns
		fmt.Fprintf(w, "%s\t%.2f\t%.2fx\t\n", l.name, us, float64(best[i])/float64(ref))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return runCalls(ctx, c, rateText, rounds, out, progress)
}

// loopOnce runs l loopRuns times in one EVAL on keys of its own and
// returns how long the call took.
func loopOnce(ctx context.Context, c *goredis.Client, l loopScript) (time.Duration, error) {
	ns := fmt.Sprintf("peers:scripts:%d:", time.Now().UnixNano())
	args := []any{loopRuns, len(l.keys)}
	for _, k := range l.keys {
		args = append(args, ns+k)
	}
	for _, a := range l.args {
		args = append(args, a)
	}
	start := time.Now()
	err := c.Eval(ctx, fmt.Sprintf(loopLua, l.top, l.text, loopKeys), nil, args...).Err()
	return time.Since(start), err
}
