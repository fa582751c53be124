package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/redis"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
	"github.com/ratelimit-go/ratelimit/servertest/serverinfo"
)

// Permits (-permits): an in-flight limit's acquire and release, ours beside
// the lease semaphore a user writes on a sorted set (plainAcquire: prune
// the ended leases, count, add; ZREM to release), in the same run:
//
//   - the scripts' own time on the server: permitRuns acquires in one
//     EVAL, over loopKeys keys, each key holding permitHold permits of
//     permitLimit (every acquire admitted), each acquire followed by the
//     release of the permit taken permitHold rounds before on that key;
//   - through the clients: -goroutines goroutines acquiring and releasing
//     over -keys keys for -duration, ours by Limiter.Acquire and
//     Permit.Release on the go-redis store (a renewal timer per permit
//     included), the semaphore by its EVALSHA and a ZREM; pairs per second,
//     and the server's time per pair from INFO commandstats.
//
// Rows take turns; the fastest loop and the median client run are reported.

const (
	permitRuns  = 5000
	permitLimit = 20
	permitHold  = 10
	permitLease = time.Minute
)

// plainAcquire is the lease semaphore a user writes: KEYS[1] the key's
// sorted set; ARGV now (ms), lease (ms), limit, the holder's id.
const plainAcquire = `local now, lease = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], now + lease, ARGV[4])
redis.call('PEXPIRE', KEYS[1], lease)
return 1`

const plainRelease = `return redis.call('ZREM', KEYS[1], ARGV[1])`

// pairLua runs acquire then, after permitHold rounds of the keys, the
// release of an earlier permit of the same key, ARGV[1] times: ARGV[2] the
// key's pattern (loopKey), then the acquire's arguments (a count, the
// arguments, the index of the id among them) and the release's.
const pairLua = `%s
local function acquire(KEYS, ARGV)
%s
end
local function release(KEYS, ARGV)
%s
end
local n, pattern = tonumber(ARGV[1]), ARGV[2]
local na = tonumber(ARGV[3])
local acq, rel = {}, {}
for i = 1, na do acq[i] = ARGV[3 + i] end
local ida, nr = tonumber(ARGV[4 + na]), tonumber(ARGV[5 + na])
for i = 1, nr do rel[i] = ARGV[5 + na + i] end
local idr = tonumber(ARGV[6 + na + nr])
local keys, hold, admitted = %d, %d, 0
for i = 1, n do
  local k = {(string.gsub(pattern, '@ID@', tostring(i %% keys)))}
  acq[ida] = tostring(i)
  local r = acquire(k, acq)
  if r == 1 or (type(r) == 'table' and r[1] == 1) then admitted = admitted + 1 end
  if i > keys * hold then
    rel[idr] = tostring(i - keys * hold)
    release(k, rel)
  end
end
return admitted`

// pairScript is one way to acquire and release, as pairLua runs it.
type pairScript struct {
	name                  string
	top, acquire, release string
	key                   string
	acqArgs, relArgs      []string
	acqID, relID          int // 1-based
}

func pairScripts() []pairScript {
	rule, err := backend.NewRule(backend.InFlight, permitLimit, permitLease, 0, permitLease, "ours:")
	if err != nil {
		panic(err) // a constant policy
	}
	now := time.Unix(1_800_000_000, 0)
	req := backend.Request{Rule: rule, Key: loopKey, Cost: 1, Now: now.UnixMicro(), Admitted: 1}
	acq, rel := lua.Args(req, lua.Acquire), lua.Args(req, lua.Release)
	text := lua.For(backend.InFlight).Text
	top, body := lua.FunctionParts(backend.InFlight)
	ms := strconv.FormatInt(now.UnixMilli(), 10)
	return []pairScript{
		{name: "a plain lease semaphore (ZREMRANGEBYSCORE, ZCARD, ZADD; ZREM)", acquire: plainAcquire, release: plainRelease, key: "plain:{" + loopKey + "}",
			acqArgs: []string{ms, strconv.FormatInt(permitLease.Milliseconds(), 10), strconv.Itoa(permitLimit), "1"}, acqID: 4, relArgs: []string{"1"}, relID: 1},
		{name: "ratelimit permits (EVALSHA)", acquire: text, release: text, key: lua.Keys(req)[0], acqArgs: acq, acqID: 8, relArgs: rel, relID: 8},
		{name: "ratelimit permits (FCALL)", top: top, acquire: body, release: body, key: lua.Keys(req)[0], acqArgs: acq, acqID: 8, relArgs: rel, relID: 8},
	}
}

// pairOnce runs p permitRuns times in one EVAL on keys of their own and
// returns how long the call took.
func pairOnce(ctx context.Context, c *goredis.Client, p pairScript) (time.Duration, error) {
	ns := fmt.Sprintf("peers:permits:%d:", time.Now().UnixNano())
	args := []any{permitRuns, ns + p.key, len(p.acqArgs)}
	for _, a := range p.acqArgs {
		args = append(args, a)
	}
	args = append(args, p.acqID, len(p.relArgs))
	for _, a := range p.relArgs {
		args = append(args, a)
	}
	args = append(args, p.relID)
	start := time.Now()
	n, err := c.Eval(ctx, fmt.Sprintf(pairLua, p.top, p.acquire, p.release, loopKeys, permitHold), nil, args...).Int()
	d := time.Since(start)
	if err == nil && n != permitRuns {
		err = fmt.Errorf("%d of %d acquires admitted: a permit was not released", n, permitRuns)
	}
	return d, err
}

// runPermits measures pairScripts, then the clients, rounds times each.
func runPermits(addr string, c config, out, progress io.Writer) error {
	client := goredis.NewClient(&goredis.Options{Addr: addr, ReadTimeout: time.Minute})
	defer client.Close()
	ctx := context.Background()
	ps := pairScripts()
	best := make([]time.Duration, len(ps))
	for r := range c.rounds {
		fmt.Fprintf(progress, "permits: scripts round %d/%d\n", r+1, c.rounds)
		for j := range ps {
			i := (j + r) % len(ps)
			d, err := pairOnce(ctx, client, ps[i])
			if err != nil {
				return fmt.Errorf("%s: %w", ps[i].name, err)
			}
			if best[i] == 0 || d < best[i] {
				best[i] = d
			}
		}
	}
	fmt.Fprintf(out, "\npermits, the scripts' own time on the server: %d acquires and releases in one EVAL over %d keys, %d of %d held each, fastest of %d rounds\n",
		permitRuns, loopKeys, permitHold, permitLimit, c.rounds)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "script\tµs/acquire+release\tvs the plain semaphore\t")
	for i, p := range ps {
		fmt.Fprintf(w, "%s\t%.2f\t%.2fx\t\n", p.name, float64(best[i].Nanoseconds())/1000/permitRuns, float64(best[i])/float64(best[0]))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return runPermitClients(ctx, client, addr, c, out, progress)
}

// permitRow is one way to hold a permit through a client.
type permitRow struct {
	name string
	open func(ns string) (pair func(ctx context.Context, key string, id int64) (bool, error), close func(), err error)
}

func permitRows(addr string, conns int) []permitRow {
	newClient := func() *goredis.Client {
		return goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: conns, ContextTimeoutEnabled: true})
	}
	return []permitRow{
		{name: "a plain lease semaphore (EVALSHA; ZREM)", open: func(ns string) (func(context.Context, string, int64) (bool, error), func(), error) {
			c := newClient()
			acquire := goredis.NewScript(plainAcquire)
			lease := permitLease.Milliseconds()
			return func(ctx context.Context, key string, id int64) (bool, error) {
				k, member := ns+"{"+key+"}", strconv.FormatInt(id, 10)
				ok, err := acquire.Run(ctx, c, []string{k}, time.Now().UnixMilli(), lease, permitLimit, member).Int()
				if err != nil || ok == 0 {
					return false, err
				}
				return true, c.ZRem(ctx, k, member).Err()
			}, func() { _ = c.Close() }, nil
		}},
		{name: "ratelimit Limiter.Acquire; Permit.Release (go-redis)", open: func(ns string) (func(context.Context, string, int64) (bool, error), func(), error) {
			c := newClient()
			s, err := redis.New(c)
			if err != nil {
				return nil, nil, err
			}
			l, err := ratelimit.New(s, ratelimit.Concurrency(permitLimit, permitLease), ratelimit.WithPrefix(ns))
			if err != nil {
				return nil, nil, err
			}
			return func(ctx context.Context, key string, _ int64) (bool, error) {
				p, d, err := l.Acquire(ctx, key)
				if err != nil || !d.Allowed {
					return false, err
				}
				return true, p.Release(ctx)
			}, func() { _ = c.Close() }, nil
		}},
	}
}

// runPermitClients runs each row c.rounds times, interleaved, and prints
// the median of each: pairs per second, and the server's time per pair.
func runPermitClients(ctx context.Context, stats *goredis.Client, addr string, c config, out, progress io.Writer) error {
	rows := permitRows(addr, c.goroutines)
	rates, server := make([][]float64, len(rows)), make([][]float64, len(rows))
	for r := range c.rounds {
		for j := range rows {
			i := (j + r) % len(rows)
			fmt.Fprintf(progress, "permits: clients round %d/%d: %s\n", r+1, c.rounds, rows[i].name)
			rate, us, err := permitRun(ctx, stats, rows[i], c, fmt.Sprintf("peers:permits:%d:%d:", time.Now().UnixNano(), i))
			if err != nil {
				return fmt.Errorf("%s: %w", rows[i].name, err)
			}
			rates[i], server[i] = append(rates[i], rate), append(server[i], us)
		}
	}
	median := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	fmt.Fprintf(out, "\npermits through the clients: %d goroutines acquiring and releasing over %d keys (at most %d each) for %v, median of %d rounds\n",
		c.goroutines, c.keys, permitLimit, c.duration, c.rounds)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "client\tpairs/s\tvs the plain semaphore\tserver µs/pair\tvs the plain semaphore\t")
	r0, s0 := median(rates[0]), median(server[0])
	for i, row := range rows {
		r, s := median(rates[i]), median(server[i])
		fmt.Fprintf(w, "%s\t%.0f\t%.2fx\t%.2f\t%.2fx\t\n", row.name, r, r/r0, s, s/s0)
	}
	return w.Flush()
}

// permitRun is one run of row: pairs per second, and the server's time
// (every command's, INFO commandstats) per pair.
func permitRun(ctx context.Context, stats *goredis.Client, row permitRow, c config, ns string) (float64, float64, error) {
	pair, closeRow, err := row.open(ns)
	if err != nil {
		return 0, 0, err
	}
	defer closeRow()
	if err := stats.ConfigResetStat(ctx).Err(); err != nil {
		return 0, 0, err
	}
	var pairs, ids atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	stop := time.Now().Add(c.duration)
	start := time.Now()
	for g := range c.goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := g; time.Now().Before(stop); n += c.goroutines {
				ok, err := pair(ctx, "user-"+strconv.Itoa(n%c.keys), ids.Add(1))
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				if ok {
					pairs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if e := failed.Load(); e != nil {
		return 0, 0, *e
	}
	st, err := serverinfo.CommandStats(ctx, stats)
	if err != nil {
		return 0, 0, err
	}
	var usec int64
	for cmd, s := range st {
		if cmd != "config|resetstat" && cmd != "config" && cmd != "info" {
			usec += s.Usec
		}
	}
	n := pairs.Load()
	if n == 0 {
		return 0, 0, fmt.Errorf("no permit acquired")
	}
	return float64(n) / elapsed.Seconds(), float64(usec) / float64(n), nil
}
