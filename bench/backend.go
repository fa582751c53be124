package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/backend/redis"
	"github.com/ratelimit-go/ratelimit/backend/valkey"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
	"github.com/ratelimit-go/ratelimit/nearcache"
	"github.com/ratelimit-go/ratelimit/servertest/serverinfo"
)

// target is a store under test, with what the report measures on its server.
type target struct {
	name  string
	store backend.Store
	addr  string                  // the server (a node of a cluster), for network backends
	admin goredis.UniversalClient // MEMORY USAGE, SCRIPT LOAD; nil for memory
	nodes []*goredis.Client       // INFO commandstats of each master
	close func()
	// cluster: the backend is a cluster (redis-benchmark needs --cluster).
	cluster bool
	// acked is a store on the same client whose writes wait for n
	// replicas' acknowledgement (WithReplicaAck); nil for memory.
	acked func(n int) (backend.Store, error)
}

// ackTimeout is how long the -replicas runs wait for the replicas.
const ackTimeout = 50 * time.Millisecond

// withAck is b with its writes acknowledged by n replicas, on the same
// client and server.
func (b *target) withAck(n int) (*target, error) {
	store, err := b.acked(n)
	if err != nil {
		return nil, err
	}
	ab := *b
	ab.name, ab.store, ab.close = fmt.Sprintf("%s+ack%d", b.name, n), store, func() {}
	return &ab, nil
}

// valkeyFlushDelay lets valkey-go gather the commands of concurrent callers
// for up to 50µs before writing them: fewer system calls per decision, the
// best throughput measured on a 2-core machine (0, 20, 50, 100µs tried).
const valkeyFlushDelay = 50 * time.Microsecond

// openBackend opens the backend called name ("memory", "redis", "valkey",
// "redis-cluster", "valkey-cluster") on addr: one server's address, or the
// comma-separated addresses of a cluster's nodes (which makes "redis" and
// "valkey" cluster backends too); with no addr, on servers of its own.
func openBackend(name, addr string, srvs *servers) (*target, error) {
	if name == "memory" {
		st, err := memory.New()
		if err != nil {
			return nil, err
		}
		return &target{name: name, store: st, close: func() { _ = st.Close() }}, nil
	}
	client, cluster := strings.TrimSuffix(name, "-cluster"), strings.HasSuffix(name, "-cluster")
	binaries := []string{"redis-server", "valkey-server"}
	if client == "valkey" {
		binaries = []string{"valkey-server", "redis-server"}
	}
	var addrs []string
	var err error
	switch {
	case addr != "":
		addrs = strings.Split(addr, ",")
		cluster = cluster || len(addrs) > 1
	case cluster:
		addrs, err = srvs.startCluster(binaries...)
	default:
		addr, err = srvs.start(binaries...)
		addrs = []string{addr}
	}
	if err != nil {
		return nil, err
	}
	b := &target{name: name, addr: addrs[0], cluster: cluster}
	closers := []func(){}
	b.close = func() {
		for _, c := range closers {
			c()
		}
	}
	if cluster {
		if b.nodes, err = masters(addrs); err != nil {
			return nil, err
		}
		admin := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
		b.admin = admin
		closers = append(closers, func() { _ = admin.Close() })
	} else {
		admin := goredis.NewClient(&goredis.Options{Addr: addrs[0]})
		b.admin, b.nodes = admin, []*goredis.Client{admin}
		closers = append(closers, func() { _ = admin.Close() })
	}
	for _, n := range b.nodes {
		closers = append(closers, func() { _ = n.Close() })
	}
	if err := b.admin.Ping(context.Background()).Err(); err != nil {
		b.close()
		return nil, fmt.Errorf("server at %s: %w", addr, err)
	}
	switch {
	case client == "redis" && cluster:
		c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, PoolSize: 64 * runtime.GOMAXPROCS(0), ContextTimeoutEnabled: true,
			MinRetryBackoff: -1, MaxRetryBackoff: -1})
		closers = append(closers, func() { _ = c.Close() })
		b.acked = func(n int) (backend.Store, error) { return redis.New(c, redis.WithReplicaAck(n, ackTimeout)) }
		b.store, err = redis.New(c)
	case client == "redis":
		c := goredis.NewClient(&goredis.Options{Addr: addrs[0], PoolSize: 64 * runtime.GOMAXPROCS(0), ContextTimeoutEnabled: true})
		closers = append(closers, func() { _ = c.Close() })
		b.acked = func(n int) (backend.Store, error) { return redis.New(c, redis.WithReplicaAck(n, ackTimeout)) }
		b.store, err = redis.New(c)
	case client == "valkey":
		c, cerr := vk.NewClient(vk.ClientOption{InitAddress: addrs, DisableCache: true, MaxFlushDelay: valkeyFlushDelay})
		if cerr != nil {
			b.close()
			return nil, fmt.Errorf("valkey client for %s: %w", addr, cerr)
		}
		closers = append(closers, c.Close)
		b.acked = func(n int) (backend.Store, error) { return valkey.New(c, valkey.WithReplicaAck(n, ackTimeout)) }
		b.store, err = valkey.New(c)
	}
	if err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// cached is b behind a nearcache of denials, sharing its server.
func (b *target) cached() (*target, error) {
	c, err := nearcache.New(b.store)
	if err != nil {
		return nil, err
	}
	cb := *b
	cb.name, cb.store = b.name+"+nearcache", c
	cb.close = func() { _ = c.Close() } // the store's own close is b's
	return &cb, nil
}

// masters are clients of the masters among the nodes at addrs.
func masters(addrs []string) ([]*goredis.Client, error) {
	var out []*goredis.Client
	for _, a := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: a})
		role, err := c.Do(context.Background(), "ROLE").Slice()
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("ROLE on %s: %w", a, err)
		}
		if role[0] != "master" {
			c.Close()
			continue
		}
		out = append(out, c)
	}
	return out, nil
}

// commandStats reads INFO commandstats: calls and time per command, summed
// over the masters of a cluster (nil for memory).
func (b *target) commandStats() (map[string]serverinfo.Stat, error) {
	if b.admin == nil {
		return nil, nil
	}
	sum := map[string]serverinfo.Stat{}
	for _, n := range b.nodes {
		stats, err := serverinfo.CommandStats(context.Background(), n)
		if err != nil {
			return nil, err
		}
		for cmd, st := range stats {
			s := sum[cmd]
			s.Calls, s.Usec, s.Failed = s.Calls+st.Calls, s.Usec+st.Usec, s.Failed+st.Failed
			sum[cmd] = s
		}
	}
	return sum, nil
}

// cpuUsec is the CPU time of the masters' processes (of a cluster, summed),
// µs: the scripts, and the network I/O and replication around them.
func (b *target) cpuUsec() (int64, error) {
	var sum int64
	for _, n := range b.nodes {
		us, err := serverinfo.CPU(context.Background(), n)
		if err != nil {
			return 0, err
		}
		sum += us
	}
	return sum, nil
}

// scriptUsec is the server's time in the scripts between two readings, µs.
func scriptUsec(before, after map[string]serverinfo.Stat) int64 {
	return serverinfo.Scripts(after).Usec - serverinfo.Scripts(before).Usec
}

// bytesPerKey measures the memory of one key's state after limit requests
// of cost 1 (a sliding log then holds limit entries; the other algorithms
// O(1) state): MEMORY USAGE of its server keys, or for the memory store the
// heap growth over many such keys.
func (b *target) bytesPerKey(p ratelimit.Policy, prefix string) (int64, error) {
	ctx := context.Background()
	if b.admin == nil {
		const keys = 2000
		st, err := memory.New(memory.WithSweepInterval(0))
		if err != nil {
			return 0, err
		}
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
	l, err := ratelimit.New(b.store, ratelimit.NewPolicy(p.Algorithm, p.Limit, time.Hour), ratelimit.WithPrefix(prefix),
		ratelimit.WithTimeout(10*time.Second)) // a size, not a speed: a loaded machine must not fail it
	if err != nil {
		return 0, err
	}
	for i := 0; i < p.Limit; i++ {
		if _, err := l.Allow(ctx, "one"); err != nil {
			return 0, err
		}
	}
	var total int64
	for _, k := range lua.StoredKeys(request(prefix, "one", l.Policy())) {
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
func (b *target) reference(cfg config, alg ratelimit.Algorithm, ops float64, progress io.Writer) ([]result, bool) {
	path, err := exec.LookPath("redis-benchmark")
	if b.admin == nil || err != nil {
		return nil, false
	}
	ctx := context.Background()
	req := request("bench:ref:", "__rand_int__", ratelimit.NewPolicy(alg, cfg.limit, cfg.window))
	text, scriptArgs := benchmarkable(lua.For(alg).Text, lua.Args(req, lua.Take))
	sha, err := b.admin.ScriptLoad(ctx, text).Result() // the script a Take runs
	if err != nil {
		fmt.Fprintf(progress, "reference: SCRIPT LOAD: %v\n", err)
		return nil, false
	}
	host, port, _ := strings.Cut(b.addr, ":")
	clusterArgs := []string{}
	if b.cluster {
		clusterArgs = append(clusterArgs, "--cluster")
	}
	keys := lua.Keys(req)
	if b.cluster {
		// redis-benchmark --cluster sends a command to the node of the slot
		// of "{tag}", which it replaces in every key with one of that node's.
		for i, k := range keys {
			keys[i] = strings.Replace(k, "{__rand_int__}", "__rand_int__{tag}", 1)
		}
	}
	args := append([]string{"EVALSHA", sha, strconv.Itoa(len(keys))}, keys...)
	args = append(args, scriptArgs...)
	pipelines := []int{1}
	if strings.HasPrefix(b.name, "valkey") {
		pipelines = append(pipelines, 16)
	}
	var rows []result
	for _, p := range pipelines {
		// Repeated, and the median reported: one run of redis-benchmark
		// varied 2x from the next on a busy machine.
		n := int(max(10000, ops*cfg.duration.Seconds()*float64(p)/2/referenceRuns))
		var runs []float64
		for i := range referenceRuns {
			st := newStatus(progress)
			st.line(fmt.Sprintf("running redis-benchmark -c %d -P %d -n %d on %s (%d/%d)...", cfg.concurrency, p, n, b.addr, i+1, referenceRuns))
			cmd := exec.Command(path, append(append([]string{"-h", host, "-p", port, "-c", strconv.Itoa(cfg.concurrency),
				"-P", strconv.Itoa(p), "-n", strconv.Itoa(n), "-r", strconv.Itoa(cfg.keys), "-q"}, clusterArgs...), args...)...)
			out, err := cmd.CombinedOutput()
			st.clear()
			m := rpsLine.FindAllSubmatch(out, -1)
			if err != nil || len(m) == 0 {
				fmt.Fprintf(progress, "reference: redis-benchmark: %v %s\n", err, lastLine(out))
				break
			}
			rps, _ := strconv.ParseFloat(string(m[len(m)-1][1]), 64)
			runs = append(runs, rps)
		}
		if len(runs) < referenceRuns {
			continue
		}
		sorted := slices.Sorted(slices.Values(runs))
		rows = append(rows, result{Backend: fmt.Sprintf("redis-benchmark -c %d -P %d", cfg.concurrency, p), Algorithm: alg.String(),
			Concurrency: cfg.concurrency, OpsPerSec: sorted[len(sorted)/2], OpsPerSecRuns: runs, RoundtripsPerDecision: 1 / float64(p), reference: true})
	}
	return rows, len(rows) > 0
}

// benchmarkable is the script text and its arguments as redis-benchmark can
// send them: on its command line, where an argument with a NUL byte (the
// rule's numbers, packed as doubles) cannot go. Such an argument is set by
// a line before the script instead (one assignment of a constant, a few
// nanoseconds of a call's microseconds), and a stand-in is sent.
func benchmarkable(text string, args []string) (string, []string) {
	var set strings.Builder
	args = slices.Clone(args)
	for i, a := range args {
		if !strings.ContainsRune(a, 0) {
			continue
		}
		fmt.Fprintf(&set, "ARGV[%d] = \"", i+1)
		for _, c := range []byte(a) {
			fmt.Fprintf(&set, "\\%03d", c)
		}
		set.WriteString("\"\n")
		args[i] = "-"
	}
	return set.String() + text, args
}

// referenceRuns is how many times redis-benchmark runs per reference row.
const referenceRuns = 3

func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(strings.ReplaceAll(string(out), "\r", "\n")), "\n")
	return lines[len(lines)-1]
}

// request is a request of cost 1 for key under prefix and p, as a Limiter
// sends it (the policy compiled, kept for its window), on the server's clock.
func request(prefix, key string, p ratelimit.Policy) backend.Request {
	rule, err := backend.NewRule(p.Algorithm, int64(p.Limit), p.Window, int64(p.Burst), p.Window, prefix)
	if err != nil {
		panic(err) // the bench's own policies, validated by its flags
	}
	return backend.Request{Rule: rule, Key: key, Cost: 1}
}
