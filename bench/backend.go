package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/backend/redis"
	"github.com/ratelimit-go/ratelimit/backend/valkey"
	"github.com/ratelimit-go/ratelimit/internal/script"
	"github.com/ratelimit-go/ratelimit/internal/serverinfo"
	"github.com/ratelimit-go/ratelimit/internal/testserver"
)

// backend is a store under test, with what the report measures on its server.
type backend struct {
	name  string
	store ratelimit.Store
	addr  string          // the server, for network backends
	admin *goredis.Client // reads INFO and MEMORY USAGE; nil for memory
	close func()
}

// valkeyFlushDelay lets valkey-go gather the commands of concurrent callers
// for up to 50µs before writing them: fewer system calls per decision, the
// best throughput measured on a 2-core machine (0, 20, 50, 100µs tried).
const valkeyFlushDelay = 50 * time.Microsecond

// servers are the throwaway servers this run started, one per list of
// binaries asked for (so one per network backend).
type servers map[string]*testserver.Server

func (s *servers) start(binaries ...string) (string, error) {
	if *s == nil {
		*s = servers{}
	}
	id := strings.Join(binaries, ",")
	if srv, ok := (*s)[id]; ok {
		return srv.Addr, nil
	}
	srv, err := testserver.StartFromPath(binaries)
	if err != nil {
		return "", fmt.Errorf("%w: or pass -addr host:port of a running server", err)
	}
	(*s)[id] = srv
	return srv.Addr, nil
}

func (s *servers) stopAll() {
	for _, srv := range *s {
		srv.Stop()
	}
}

func openBackend(name, addr string, srvs *servers) (*backend, error) {
	if name == "memory" {
		st := memory.New()
		return &backend{name: name, store: st, close: func() { _ = st.Close() }}, nil
	}
	if addr == "" {
		binaries := []string{"redis-server", "valkey-server"}
		if name == "valkey" {
			binaries = []string{"valkey-server", "redis-server"}
		}
		var err error
		if addr, err = srvs.start(binaries...); err != nil {
			return nil, err
		}
	}
	admin := goredis.NewClient(&goredis.Options{Addr: addr})
	if err := admin.Ping(context.Background()).Err(); err != nil {
		admin.Close()
		return nil, fmt.Errorf("server at %s: %w", addr, err)
	}
	b := &backend{name: name, addr: addr, admin: admin}
	switch name {
	case "redis":
		c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 64 * runtime.GOMAXPROCS(0), ContextTimeoutEnabled: true})
		b.store, b.close = redis.New(c), func() { c.Close(); admin.Close() }
	case "valkey":
		c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true, MaxFlushDelay: valkeyFlushDelay})
		if err != nil {
			admin.Close()
			return nil, fmt.Errorf("valkey client for %s: %w", addr, err)
		}
		b.store, b.close = valkey.New(c), func() { c.Close(); admin.Close() }
	}
	return b, nil
}

// scriptCommands are the commands the scripts call on the server; INFO
// counts them too, though no client sent them.
var scriptCommands = map[string]bool{
	"time": true, "zremrangebyscore": true, "zcard": true, "zcount": true, "zrangebyscore": true,
	"incrby": true, "hincrby": true, "zadd": true, "zrem": true, "zrevrange": true, "zremrangebyrank": true, "zscore": true, "pexpire": true,
	"hmget": true, "hset": true, "get": true, "set": true,
	"info": true, // the report's own
}

// commandCalls reads INFO commandstats: calls per command (nil for memory).
func (b *backend) commandCalls() (map[string]int64, error) {
	if b.admin == nil {
		return nil, nil
	}
	return serverinfo.CommandCalls(context.Background(), b.admin)
}

// clientCommands is how many commands clients sent between two readings:
// every call counted by the server but those made from inside the scripts.
func clientCommands(before, after map[string]int64) int64 {
	var n int64
	for cmd, calls := range after {
		if !scriptCommands[strings.SplitN(cmd, "|", 2)[0]] {
			n += calls - before[cmd]
		}
	}
	return n
}

// bytesPerKey measures the memory of one key's state after limit requests
// of cost 1 (a sliding log then holds limit entries; the other algorithms
// O(1) state): MEMORY USAGE of its server keys, or for the memory store the
// heap growth over many such keys.
func (b *backend) bytesPerKey(p ratelimit.Policy, prefix string) (int64, error) {
	ctx := context.Background()
	if b.admin == nil {
		const keys = 2000
		st := memory.New(memory.WithSweepInterval(0))
		defer st.Close()
		at := time.Now()
		l, err := ratelimit.New(st, p, ratelimit.WithCallerClock(func() time.Time { return at }))
		if err != nil {
			return 0, err
		}
		var ms0, ms1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		for k := 0; k < keys; k++ {
			for i := 0; i < p.Limit; i++ { // limit requests of cost 1: a sliding log's worst case
				if _, err := l.Allow(ctx, "k"+strconv.Itoa(k)); err != nil {
					return 0, err
				}
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&ms1)
		runtime.KeepAlive(st)
		return int64(ms1.HeapAlloc-ms0.HeapAlloc) / keys, nil
	}
	l, err := ratelimit.New(b.store, ratelimit.NewPolicy(p.Algorithm, p.Limit, time.Hour), ratelimit.WithPrefix(prefix))
	if err != nil {
		return 0, err
	}
	for i := 0; i < p.Limit; i++ {
		if _, err := l.Allow(ctx, "one"); err != nil {
			return 0, err
		}
	}
	var total int64
	req := ratelimit.Request{Key: ratelimit.Key{Prefix: prefix, ID: "one"}, Policy: l.Policy()}
	for _, k := range script.Keys(req) {
		n, err := b.admin.MemoryUsage(ctx, k).Result()
		if err != nil {
			return 0, fmt.Errorf("MEMORY USAGE %s: %w", k, err)
		}
		total += n
	}
	return total, l.Reset(ctx, "one")
}

var rpsLine = regexp.MustCompile(`([0-9.]+) requests per second`)

// reference runs redis-benchmark with the same script, by EVALSHA, on the
// same server: with as many connections unpipelined and, for Valkey (whose
// client pipelines), also pipelined by 16. It needs redis-benchmark on PATH.
func (b *backend) reference(cfg config, alg ratelimit.Algorithm, ops float64, progress io.Writer) ([]result, bool) {
	path, err := exec.LookPath("redis-benchmark")
	if b.admin == nil || err != nil {
		return nil, false
	}
	ctx := context.Background()
	sha, err := b.admin.ScriptLoad(ctx, script.Decide).Result()
	if err != nil {
		fmt.Fprintf(progress, "reference: SCRIPT LOAD: %v\n", err)
		return nil, false
	}
	host, port, _ := strings.Cut(b.addr, ":")
	req := ratelimit.Request{Key: ratelimit.Key{Prefix: "bench:ref:", ID: "__rand_int__"}, Policy: ratelimit.NewPolicy(alg, cfg.limit, cfg.window), Cost: 1}
	keys := script.Keys(req)
	args := append([]string{"EVALSHA", sha, strconv.Itoa(len(keys))}, keys...)
	args = append(args, script.Args(req, script.Take)...)
	pipelines := []int{1}
	if b.name == "valkey" {
		pipelines = append(pipelines, 16)
	}
	var rows []result
	for _, p := range pipelines {
		n := int(max(20000, ops*cfg.duration.Seconds()*float64(p)/2))
		fmt.Fprintf(progress, "\rrunning redis-benchmark -c %d -P %d -n %d on %s...", cfg.concurrency, p, n, b.addr)
		cmd := exec.Command(path, append([]string{"-h", host, "-p", port, "-c", strconv.Itoa(cfg.concurrency),
			"-P", strconv.Itoa(p), "-n", strconv.Itoa(n), "-r", strconv.Itoa(cfg.keys), "-q"}, args...)...)
		out, err := cmd.CombinedOutput()
		fmt.Fprintf(progress, "\r%-80s\r", "")
		m := rpsLine.FindAllSubmatch(out, -1)
		if err != nil || len(m) == 0 {
			fmt.Fprintf(progress, "reference: redis-benchmark: %v %s\n", err, lastLine(out))
			continue
		}
		rps, _ := strconv.ParseFloat(string(m[len(m)-1][1]), 64)
		rows = append(rows, result{Backend: fmt.Sprintf("redis-benchmark -c %d -P %d", cfg.concurrency, p), Algorithm: alg.String(),
			Concurrency: cfg.concurrency, OpsPerSec: rps, RoundtripsPerDecision: 1 / float64(p), reference: true})
	}
	return rows, len(rows) > 0
}

func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(strings.ReplaceAll(string(out), "\r", "\n")), "\n")
	return lines[len(lines)-1]
}
