// Command bench measures ratelimitd beside envoyproxy/ratelimit, the rate
// limit service Envoy users run, in one run on one redis-server: the same
// configuration (fixed windows), the same load (callers concurrent gRPC
// clients, as Envoy is, cycling over values descriptor values, descriptors
// a request), then ratelimitd with the sliding log and GCRA on that load.
//
//	cd cmd/ratelimitd/bench && GOWORK=off go run . [-duration 3s] [-rounds 3] [-descriptors 3]
//	cd cmd/ratelimitd/bench && GOWORK=off go run . -diff [-peer BINARY]   # every answer beside the peer's (diff.go)
//
// This module stays out of go.work: envoyproxy/ratelimit's dependency graph
// (and the Go version it asks for) must not reach the library's workspace.
// It pins the peer's version in go.mod; tools.go makes `go build` of the
// peer's command use exactly it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/servertest/serverinfo"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

func main() {
	duration := flag.Duration("duration", 3*time.Second, "load per measurement")
	descriptors := flag.Int("descriptors", 1, "descriptors per request, each under a rule of its own with the same limit (1 to 16)")
	rounds := flag.Int("rounds", 3, "measurements of each service, interleaved; medians are reported")
	callers := flag.Int("callers", 64, "concurrent callers")
	values := flag.Int("values", 1000, "descriptor values cycled over")
	limit := flag.Int("limit", 10, "requests per hour per value: every value is asked more often, so both admit exactly limit*values")
	redisAddr := flag.String("redis", "", "an existing redis-server (default: start one on a free port)")
	diff := flag.Bool("diff", false, "instead, the differential run: both services on envoyproxy/ratelimit's own configurations, every answer compared (see diff.go)")
	peer := flag.String("peer", "", "envoyproxy/ratelimit's binary to run (default: built at the version go.mod pins), e.g. one built from its master")
	only := flag.String("only", "", "measure only ratelimitd's rows whose names match this regular expression (the peer's two rows always run)")
	ours := flag.String("ours", "", "ratelimitd's binary to run (default: built from this repository), e.g. an earlier one's")
	load := flag.String("load", "h2", "the load's client: h2, HTTP/2 frames written and read by the bench (h2load.go), or grpc, grpc-go's client")
	flag.Parse()
	if *diff {
		if err := differential(*peer, *ours); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *descriptors < 1 || *descriptors > 16 {
		fmt.Fprintln(os.Stderr, "bench: -descriptors: want 1 to 16")
		os.Exit(2)
	}
	if *load != "h2" && *load != "grpc" {
		fmt.Fprintln(os.Stderr, "bench: -load: want h2 or grpc")
		os.Exit(2)
	}
	onlyRe, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: -only:", err)
		os.Exit(2)
	}
	if err := run(*duration, *rounds, *callers, *values, *limit, *descriptors, *redisAddr, *peer, *ours, *load, onlyRe); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(duration time.Duration, rounds, callers, values, limit, descriptors int, redisAddr, peer, ours, load string, only *regexp.Regexp) error {
	dir, err := os.MkdirTemp("", "ratelimitd-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if redisAddr == "" {
		srv, err := testserver.StartFromPath([]string{"redis-server"})
		if err != nil {
			return err
		}
		defer srv.Stop()
		redisAddr = srv.Addr
	}
	fmt.Printf("redis-server at %s; %d callers over %d values, %d descriptors a request, %v per measurement, %d rounds (medians), the load's client %s\n",
		redisAddr, callers, values, descriptors, duration, rounds, load)
	bins, err := binaries(dir, peer, ours)
	if err != nil {
		return err
	}
	services, err := startAll(dir, bins, redisAddr, limit, descriptors, only)
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range services {
			s.stop()
		}
	}()
	results := make([][]result, len(services))
	for r := 0; r < rounds; r++ {
		// Each round starts at another service, so that none is always
		// measured at one place in the run (the first after a start,
		// the last on a server holding every earlier round's keys).
		for j := range services {
			i := (j + r*len(services)/rounds) % len(services)
			s := services[i]
			clearOfTheHour(duration)
			res, err := measure(s, redisAddr, fmt.Sprintf("s%d-r%d", i, r), load, duration, callers, values, descriptors)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			results[i] = append(results[i], res)
		}
	}
	report(services, results, limit*values)
	return nil
}

// clearOfTheHour waits, when a measurement of d starting now would span
// the top of an hour, until that has passed: the rules' windows are an
// hour's, fixed windows turn there, and a round that spans the turn admits
// more than limit*values from every service (10,312 in one run).
func clearOfTheHour(d time.Duration) { clearOfATurn(time.Hour, d+2*time.Second, time.Second) }

// clearOfATurn waits, when a window of length unit (aligned on the epoch,
// as both services align them) turns within d from now, until that turn
// is past by past.
func clearOfATurn(unit, d, past time.Duration) {
	now := time.Now()
	turn := now.Truncate(unit).Add(unit)
	if now.Add(d).After(turn) {
		time.Sleep(time.Until(turn) + past)
	}
}

// differential builds the services (peer and ours, when given, are
// binaries to run instead) and runs the differential (diff.go).
func differential(peer, ours string) error {
	dir, err := os.MkdirTemp("", "ratelimitd-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bins, err := binaries(dir, peer, ours)
	if err != nil {
		return err
	}
	return runDiff(bins, filepath.Join("..", "testdata", "upstream"))
}

// binaries are the services' binaries: peer and ours when given, else
// built (build).
func binaries(dir, peer, ours string) (map[string]string, error) {
	bins, err := build(dir)
	if err != nil {
		return nil, err
	}
	if peer != "" {
		bins["envoy"] = peer
	}
	if ours != "" {
		bins["ratelimitd"] = ours
	}
	return bins, nil
}

// build compiles both services: ratelimitd from this repository, the peer
// at the version go.mod pins.
func build(dir string) (map[string]string, error) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		return nil, err
	}
	bins := map[string]string{"ratelimitd": filepath.Join(dir, "ratelimitd"), "envoy": filepath.Join(dir, "envoy-ratelimit")}
	cmd := exec.Command("go", "build", "-o", bins["ratelimitd"], "./cmd/ratelimitd")
	cmd.Dir, cmd.Stderr = root, os.Stderr
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(root, "go.work")) // this module runs with GOWORK=off
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("building ratelimitd: %w", err)
	}
	cmd = exec.Command("go", "build", "-o", bins["envoy"], "github.com/envoyproxy/ratelimit/src/service_cmd")
	cmd.Env, cmd.Stderr = append(os.Environ(), "GOWORK=off"), os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("building envoyproxy/ratelimit: %w", err)
	}
	return bins, nil
}

// result is one measurement.
type result struct {
	perSecond float64
	p50, p99  time.Duration
	admitted  int64
	errors    int64
	// commands is what the service sent the server per request: the
	// scripts ratelimitd ran, the INCRBY and EXPIRE envoyproxy/ratelimit
	// pipelines (INFO commandstats, less the scripts' own commands and
	// failed calls).
	commands float64
	// cpu is the service's process CPU time (user and system) per
	// request, load this bench's own (its gRPC clients').
	cpu, load time.Duration
	// server is redis-server's CPU time per request (INFO cpu).
	server time.Duration
}

// measure runs the load on s for d: callers goroutines, each sending one
// ShouldRateLimit after another, cycling over values (value v of round
// run is "run-v", so each round starts from fresh counters), through the
// load's client (load: h2 or grpc).
func measure(s *service, redisAddr, run, load string, d time.Duration, callers, values, descriptors int) (result, error) {
	var admitted, failures atomic.Int64
	var firstErr atomic.Value
	lat := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	ctx := context.Background()
	// The requests are built before the clock starts: the load's own CPU
	// is taken from the same cores as the services', and what it spends
	// on building requests would only narrow every ratio.
	// (wire.go: they are encoded then too.)
	reqs := make([]encoded, values)
	for v := range reqs {
		req := &rlsv3.RateLimitRequest{Domain: "bench"}
		for _, k := range descriptorKeys(descriptors) {
			req.Descriptors = append(req.Descriptors, &rlv3.RateLimitDescriptor{
				Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: k, Value: fmt.Sprintf("%s-%d", run, v)}},
			})
		}
		var err error
		if reqs[v], err = encode(req); err != nil {
			return result{}, err
		}
	}
	var h2 *h2conn
	var msgs [][]byte // reqs[v] as a gRPC message, for h2
	if load == "h2" {
		var err error
		if h2, err = dialH2(s.addr); err != nil {
			return result{}, err
		}
		defer h2.Close()
		for _, r := range reqs {
			msgs = append(msgs, grpcMessage(r))
		}
	}
	before, serverBefore, err := commandStats(ctx, redisAddr)
	if err != nil {
		return result{}, err
	}
	cpuBefore, err := cpuTime(s.cmd.Process.Pid)
	if err != nil {
		return result{}, err
	}
	loadBefore, err := cpuTime(os.Getpid())
	if err != nil {
		return result{}, err
	}
	began := time.Now()
	deadline := began.Add(d)
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			cl := newCall()
			for i := 0; time.Now().Before(deadline); i++ {
				v := (c + i*callers) % values
				t0 := time.Now()
				var res overall
				var err error
				if h2 != nil {
					res.code, err = h2.call(cl, msgs[v])
				} else {
					err = s.conn.Invoke(ctx, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, reqs[v], &res, loadCall...) // reqs: read only, shared
				}
				lat[c] = append(lat[c], time.Since(t0))
				switch {
				case err != nil:
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
				case res.code == rlsv3.RateLimitResponse_OK:
					admitted.Add(1)
				}
			}
		}(c)
	}
	wg.Wait()
	elapsed := time.Since(began)
	cpuAfter, err := cpuTime(s.cmd.Process.Pid)
	if err != nil {
		return result{}, err
	}
	loadAfter, err := cpuTime(os.Getpid())
	if err != nil {
		return result{}, err
	}
	after, serverAfter, err := commandStats(ctx, redisAddr)
	if err != nil {
		return result{}, err
	}
	if e := firstErr.Load(); e != nil {
		return result{}, fmt.Errorf("%d errors, the first: %v", failures.Load(), e)
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if len(all) == 0 {
		return result{}, fmt.Errorf("no decision in %v", d)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	return result{
		perSecond: float64(len(all)) / elapsed.Seconds(),
		p50:       all[len(all)/2],
		p99:       all[len(all)*99/100],
		admitted:  admitted.Load(),
		commands:  float64(serverinfo.ClientCommands(before, after)) / float64(len(all)),
		cpu:       (cpuAfter - cpuBefore) / time.Duration(len(all)),
		load:      (loadAfter - loadBefore) / time.Duration(len(all)),
		server:    (serverAfter - serverBefore) / time.Duration(len(all)),
	}, nil
}

// commandStats reads INFO commandstats of the server at addr, and its CPU
// time.
func commandStats(ctx context.Context, addr string) (map[string]serverinfo.Stat, time.Duration, error) {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	stats, err := serverinfo.CommandStats(ctx, c)
	if err != nil {
		return nil, 0, err
	}
	cpu, err := serverinfo.CPU(ctx, c)
	return stats, time.Duration(cpu) * time.Microsecond, err
}

func report(services []*service, results [][]result, want int) {
	med := func(rs []result, f func(result) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		sort.Float64s(xs)
		return xs[len(xs)/2]
	}
	ref := results[0]
	refRate := med(ref, func(r result) float64 { return r.perSecond })
	refP50 := med(ref, func(r result) float64 { return float64(r.p50) })
	refP99 := med(ref, func(r result) float64 { return float64(r.p99) })
	cachedRate := med(results[1], func(r result) float64 { return r.perSecond })
	fmt.Printf("\n%-52s %10s %9s %9s %8s %8s %8s %8s %9s %9s %9s %9s  %s\n", "service (same redis-server, same load)", "requests/s", "p50", "p99", "x rate", "x cached", "x p50", "x p99", "cmds/req", "cpu/req", "load/req", "redis/req", "admitted per round (exact: "+fmt.Sprint(want)+")")
	for i, s := range services {
		rate := med(results[i], func(r result) float64 { return r.perSecond })
		p50 := med(results[i], func(r result) float64 { return float64(r.p50) })
		p99 := med(results[i], func(r result) float64 { return float64(r.p99) })
		var adm []string
		for _, r := range results[i] {
			adm = append(adm, fmt.Sprint(r.admitted))
		}
		cmds := med(results[i], func(r result) float64 { return r.commands })
		cpu := med(results[i], func(r result) float64 { return float64(r.cpu) })
		load := med(results[i], func(r result) float64 { return float64(r.load) })
		server := med(results[i], func(r result) float64 { return float64(r.server) })
		fmt.Printf("%-52s %10.0f %9v %9v %8.2f %8.2f %8.2f %8.2f %9.2f %9v %9v %9v  %s\n", s.name, rate,
			time.Duration(p50).Round(10*time.Microsecond), time.Duration(p99).Round(10*time.Microsecond),
			rate/refRate, rate/cachedRate, p50/refP50, p99/refP99, cmds, time.Duration(cpu).Round(100*time.Nanosecond), time.Duration(load).Round(100*time.Nanosecond), time.Duration(server).Round(100*time.Nanosecond), strings.Join(adm, " "))
	}
	fmt.Println("\nx rate, x p50, x p99: ratios to envoyproxy/ratelimit's (its local cache off) in this run (rate above 1 and latencies below 1 are better);")
	fmt.Println("x cached: the rate's ratio to envoyproxy/ratelimit's with its local cache on (LOCAL_CACHE_SIZE_IN_BYTES).")
	fmt.Println("cpu/req: the service process's CPU time (user and system) per request; load/req: this bench's own (the clients');")
	fmt.Println("redis/req: redis-server's (INFO cpu). The three share the machine's cores.")
	fmt.Println("cmds/req: commands sent to the server per request: ratelimitd's scripts (a near cache answers some requests with none),")
	fmt.Println("envoyproxy/ratelimit's INCRBY and EXPIRE per descriptor, pipelined in one round trip.")
}
