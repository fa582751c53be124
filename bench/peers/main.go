// Command peers runs this library and its peers in one run, on the same
// keys and load, and prints each one's time per decision with its ratio to a
// peer's:
//
//	go run ./bench/peers                     # in-process stores: ratelimit's memory store, sethvargo/go-limiter, x/time/rate, ulule/limiter, six floors (floor*.go)
//	go run ./bench/peers -backend all        # also Redis: ratelimit's go-redis and valkey-go backends, go-redis/redis_rate, ulule/limiter (starts a throwaway server)
//	go run ./bench/peers -backend network -addr 127.0.0.1:6379 -json
//	go run ./bench/peers -scripts -rounds 10    # the scripts' own server time, beside redis_rate's (see scripts.go)
//	go run ./bench/peers -permits -rounds 5     # an in-flight limit's acquire and release, beside a plain lease semaphore (see permits.go)
//
// Every contender is opened fresh for each run, warmed on every key, then
// driven from 1 or 64 goroutines over the same 1,000 keys for -duration.
// The runs are interleaved (each round runs every contender once, in a
// rotated order) and the median of -rounds is reported, so that a noisy
// machine slows every contender alike. The peers live in this module of
// their own so that the library's go.mod never requires them.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// A scenario is a load: its limit per window on every key, how each key is
// warmed before the clock starts, and how many goroutines call.
type scenario struct {
	name       string
	network    bool
	limit      int
	window     time.Duration
	warm       int // calls per key before measuring
	goroutines int
	reference  string // the peer the ratios are taken against
}

func scenarios(goroutines int) []scenario {
	return []scenario{
		// Every key at its limit: the common case under abuse, and the
		// cheapest decision. A day's window, so that no run sees a key
		// refilled (a fixed window's boundary would readmit every key).
		{name: "memory, denying, 1 goroutine", limit: 100, window: 24 * time.Hour, warm: 101, goroutines: 1, reference: "sethvargo/go-limiter memorystore"},
		// A limit no key reaches (1,000,000/s each): every call records
		// a request, the most work a decision does.
		{name: "memory, admitting, 1 goroutine", limit: 10_000, window: 10 * time.Millisecond, warm: 1, goroutines: 1, reference: "sethvargo/go-limiter memorystore"},
		{name: fmt.Sprintf("memory, denying, %d goroutines", goroutines), limit: 100, window: 24 * time.Hour, warm: 101, goroutines: goroutines, reference: "sethvargo/go-limiter memorystore"},
		{name: fmt.Sprintf("memory, admitting, %d goroutines", goroutines), limit: 10_000, window: 10 * time.Millisecond, warm: 1, goroutines: goroutines, reference: "sethvargo/go-limiter memorystore"},
		// 20 per second per key at server speed (30-80 calls per key per
		// second on 2 cores): some admitted, most denied, as under load.
		{name: fmt.Sprintf("redis, %d goroutines", goroutines), network: true, limit: 20, window: time.Second, warm: 1, goroutines: goroutines, reference: "go-redis/redis_rate (GCRA)"},
		// The same two ends as in process: every call denied, every call
		// admitted (each writes), so that the server's time a decision
		// compares at one mix whatever each contender's speed (above, the
		// faster one denies more, and a denial costs the server less).
		{name: fmt.Sprintf("redis, denying, %d goroutines", goroutines), network: true, limit: 100, window: 24 * time.Hour, warm: 101, goroutines: goroutines, reference: "go-redis/redis_rate (GCRA)"},
		{name: fmt.Sprintf("redis, admitting, %d goroutines", goroutines), network: true, limit: 10_000, window: 10 * time.Millisecond, warm: 1, goroutines: goroutines, reference: "go-redis/redis_rate (GCRA)"},
	}
}

// row is one contender's median run in a scenario; its JSON form is the
// -json output.
type row struct {
	Scenario          string  `json:"scenario"`
	Contender         string  `json:"contender"`
	Peer              bool    `json:"peer"`
	NsPerDecision     float64 `json:"ns_per_decision"`
	DecisionsPerSec   float64 `json:"decisions_per_sec"`
	AllocsPerDecision float64 `json:"allocs_per_decision"`
	DeniedShare       float64 `json:"denied_share"`
	Errors            int64   `json:"errors"`
	// ServerUsPerDecision is the server's time per decision (INFO
	// commandstats over the run; 0 in process): what decides how many
	// decisions one Redis core sustains.
	ServerUsPerDecision float64 `json:"server_us_per_decision,omitempty"`
	// ServerCPUUsPerDecision is the server process's CPU time per decision
	// (INFO cpu over the run; 0 in process), which a descheduled server's
	// wait does not inflate.
	ServerCPUUsPerDecision float64 `json:"server_cpu_us_per_decision,omitempty"`
	// VsReferenceCPU is the median over the rounds of
	// ServerCPUUsPerDecision over the reference's in the same round.
	VsReferenceCPU float64 `json:"vs_reference_cpu,omitempty"`
	// VsReference is the median over the rounds of NsPerDecision over the
	// scenario's reference peer's in the same round: below 1, faster.
	VsReference float64 `json:"vs_reference"`
}

type config struct {
	backend    string
	addr       string
	duration   time.Duration
	rounds     int
	keys       int
	goroutines int
	json       bool
	scripts    bool           // measure the scripts' own time instead (scripts.go)
	permits    bool           // measure permits instead (permits.go)
	only       *regexp.Regexp // the contenders measured beside each scenario's reference
	scenarios  *regexp.Regexp // the scenarios run
}

func main() {
	var c config
	flag.StringVar(&c.backend, "backend", "memory", "memory, network (Redis) or all")
	flag.StringVar(&c.addr, "addr", "", "host:port of a Redis or Valkey server for the network runs (default: start redis-server from PATH)")
	flag.DurationVar(&c.duration, "duration", time.Second, "length of each run")
	flag.IntVar(&c.rounds, "rounds", 3, "runs of each contender per scenario; the median is reported")
	flag.IntVar(&c.keys, "keys", 1000, "keys the load is spread over")
	flag.IntVar(&c.goroutines, "goroutines", 64, "goroutines of the parallel scenarios")
	flag.BoolVar(&c.json, "json", false, "print JSON lines instead of tables")
	flag.BoolVar(&c.scripts, "scripts", false, "measure instead what each script itself costs the server per decision (many decisions in one EVAL, beside redis_rate's script), -rounds times, and report the fastest")
	flag.BoolVar(&c.permits, "permits", false, "measure instead an in-flight limit's acquire and release, beside a plain lease semaphore on a sorted set (permits.go)")
	only := flag.String("only", "", "measure only the contenders whose names match this regular expression, beside each scenario's reference")
	scenarioRE := flag.String("scenarios", "", "run only the scenarios whose names match this regular expression")
	flag.Parse()
	var err error
	if c.only, err = regexp.Compile(*only); err != nil {
		fmt.Fprintln(os.Stderr, "peers: -only:", err)
		os.Exit(2)
	}
	if c.scenarios, err = regexp.Compile(*scenarioRE); err != nil {
		fmt.Fprintln(os.Stderr, "peers: -scenarios:", err)
		os.Exit(2)
	}
	if err := run(c, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

func run(c config, out, progress io.Writer) error {
	if c.scripts || c.permits {
		c.backend = "network"
	}
	if c.backend != "memory" && c.backend != "network" && c.backend != "all" {
		return fmt.Errorf("-backend %q: want memory, network or all", c.backend)
	}
	if c.rounds < 1 || c.keys < 1 || c.goroutines < 1 || c.duration <= 0 {
		return fmt.Errorf("-rounds, -keys, -goroutines and -duration must be positive")
	}
	var network []maker
	if c.backend != "memory" {
		addr := c.addr
		if addr == "" {
			srv, err := testserver.StartFromPath([]string{"redis-server", "valkey-server"})
			if err != nil {
				return fmt.Errorf("%w: or pass -addr host:port of a running server", err)
			}
			defer srv.Stop()
			addr = srv.Addr
			c.addr = addr
			fmt.Fprintf(progress, "started %s on %s\n", srv.Origin, addr)
		}
		if c.scripts {
			return runScripts(addr, c.rounds, out, progress)
		}
		if c.permits {
			return runPermits(addr, c, out, progress)
		}
		network = networkMakers(addr, 64*runtime.GOMAXPROCS(0))
	}
	keys := make([]string, c.keys)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	for _, sc := range scenarios(c.goroutines) {
		makers := memoryMakers()
		if sc.network {
			makers = network
		}
		if (sc.network && c.backend == "memory") || (!sc.network && c.backend == "network") {
			continue
		}
		if c.scenarios != nil && !c.scenarios.MatchString(sc.name) {
			continue
		}
		if c.only != nil {
			makers = slices.DeleteFunc(slices.Clone(makers), func(m maker) bool {
				return m.name != sc.reference && !c.only.MatchString(m.name)
			})
		}
		rows, err := runScenario(sc, makers, keys, c, progress)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		if err := report(out, c, sc, rows); err != nil {
			return err
		}
	}
	return nil
}

// runScenario runs every maker c.rounds times, interleaved, and returns
// each one's median run.
func runScenario(sc scenario, makers []maker, keys []string, c config, progress io.Writer) ([]row, error) {
	runs := make([][]row, len(makers))
	for r := range c.rounds {
		for j := range makers {
			i := (j + r) % len(makers) // a rotated order: no contender always runs first
			m := makers[i]
			fmt.Fprintf(progress, "%s: round %d/%d: %s\n", sc.name, r+1, c.rounds, m.name)
			ns := fmt.Sprintf("peers:%d:%d:%d:", time.Now().UnixNano(), r, i)
			got, err := runOnce(sc, m, keys, ns, c.duration, c.addr)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.name, err)
			}
			runs[i] = append(runs[i], got)
		}
	}
	ref := slices.IndexFunc(makers, func(m maker) bool { return m.name == sc.reference })
	rows := make([]row, len(makers))
	vs, vsCPU := make([]float64, len(makers)), make([]float64, len(makers))
	for i, rs := range runs {
		// The ratio is the median of each round's ratio to the reference's
		// run of the same round, minutes apart at most: a machine whose
		// speed changes for a while (a neighbour on a shared host: both
		// this and the peers ran 2.5x slower for minutes at a time) moves
		// both runs of a round, not the ratio. Taken before any sorting.
		vs[i] = medianRatio(rs, runs, ref, func(r row) float64 { return r.NsPerDecision })
		vsCPU[i] = medianRatio(rs, runs, ref, func(r row) float64 { return r.ServerCPUUsPerDecision })
	}
	for i, rs := range runs {
		slices.SortFunc(rs, func(a, b row) int { return cmp.Compare(a.NsPerDecision, b.NsPerDecision) })
		rows[i] = rs[len(rs)/2]
		rows[i].VsReference, rows[i].VsReferenceCPU = vs[i], vsCPU[i]
	}
	return rows, nil
}

// medianRatio is the median over the rounds of f of a contender's run (rs)
// over f of the reference's run of the same round; 0 when there is none.
func medianRatio(rs []row, runs [][]row, ref int, f func(row) float64) float64 {
	var ratios []float64
	for r := range rs {
		if ref >= 0 && f(runs[ref][r]) > 0 {
			ratios = append(ratios, f(rs[r])/f(runs[ref][r]))
		}
	}
	if len(ratios) == 0 {
		return 0
	}
	slices.Sort(ratios)
	return ratios[len(ratios)/2]
}

// runOnce opens m, warms every key and drives it from sc.goroutines
// goroutines for d; on a network scenario it reads the server's time of
// the run from the server at addr.
func runOnce(sc scenario, m maker, keys []string, ns string, d time.Duration, addr string) (row, error) {
	c, err := m.open(sc.limit, sc.window, ns)
	if err != nil {
		return row{}, err
	}
	defer c.close()
	ctx := context.Background()
	for _, k := range keys {
		for range sc.warm {
			if _, err := c.allow(ctx, k); err != nil {
				return row{}, fmt.Errorf("warming %q: %w", k, err)
			}
		}
	}
	var stop atomic.Bool
	var decisions, denied, errs atomic.Int64
	var wg sync.WaitGroup
	var server *serverClock
	if sc.network {
		if server, err = startServerClock(ctx, addr); err != nil {
			return row{}, err
		}
		defer server.close()
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	began := time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	for g := range sc.goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n, no, failed int64
			for i := g * 97; !stop.Load(); i++ { // each from its own offset
				ok, err := c.allow(ctx, keys[i%len(keys)])
				n++
				switch {
				case err != nil:
					failed++
				case !ok:
					no++
				}
			}
			decisions.Add(n)
			denied.Add(no)
			errs.Add(failed)
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	runtime.ReadMemStats(&after)
	n := float64(decisions.Load())
	if n == 0 {
		return row{}, fmt.Errorf("no decision in %v", d)
	}
	r := row{Scenario: sc.name, Contender: m.name, Peer: m.peer,
		NsPerDecision:     float64(elapsed.Nanoseconds()) / n,
		DecisionsPerSec:   n / elapsed.Seconds(),
		AllocsPerDecision: float64(after.Mallocs-before.Mallocs) / n,
		DeniedShare:       float64(denied.Load()) / n,
		Errors:            errs.Load(),
	}
	if server != nil {
		us, err := server.usec(ctx, n)
		if err != nil {
			return row{}, err
		}
		r.ServerUsPerDecision = us
		if r.ServerCPUUsPerDecision, err = server.cpu(ctx, n); err != nil {
			return row{}, err
		}
	}
	return r, nil
}

func report(out io.Writer, c config, sc scenario, rows []row) error {
	if c.json {
		enc := json.NewEncoder(out)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	fmt.Fprintf(out, "\n%s: %d keys at %d per %v, median of %d runs of %v (ratios: the median of each round's)\n", sc.name, c.keys, sc.limit, sc.window, c.rounds, c.duration)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	if sc.network {
		fmt.Fprintf(w, "contender\tns/decision\tdecisions/s\tallocs/decision\tdenied\terrors\tvs %s\tserver µs/decision\tvs its\tserver CPU µs/decision\tvs its\t\n", sc.reference)
	} else {
		fmt.Fprintf(w, "contender\tns/decision\tdecisions/s\tallocs/decision\tdenied\terrors\tvs %s\t\n", sc.reference)
	}
	refServer := 0.0
	for _, r := range rows {
		if r.Contender == sc.reference {
			refServer = r.ServerUsPerDecision
		}
	}
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%.0f\t%.0f\t%.1f\t%.1f%%\t%d\t%.2fx\t", r.Contender, r.NsPerDecision, r.DecisionsPerSec, r.AllocsPerDecision, 100*r.DeniedShare, r.Errors, r.VsReference)
		if sc.network && refServer > 0 {
			fmt.Fprintf(w, "%.2f\t%.2fx\t%.2f\t%.2fx\t", r.ServerUsPerDecision, r.ServerUsPerDecision/refServer, r.ServerCPUUsPerDecision, r.VsReferenceCPU)
		}
		fmt.Fprintln(w)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if sc.network {
		for _, other := range []struct{ name, row string }{{"valkey-go", "ratelimit valkey "}, {"go-redis auto-pipelined", "ratelimit redis pipelined "}} {
			fmt.Fprintf(out, "%s over go-redis, decisions/s:", other.name)
			for _, alg := range backend.Algorithms() {
				i := slices.IndexFunc(rows, func(r row) bool { return r.Contender == "ratelimit redis "+alg.String() })
				j := slices.IndexFunc(rows, func(r row) bool { return r.Contender == other.row+alg.String() })
				if i >= 0 && j >= 0 {
					fmt.Fprintf(out, " %s %.2fx", alg, rows[j].DecisionsPerSec/rows[i].DecisionsPerSec)
				}
			}
			fmt.Fprintln(out)
		}
	}
	return nil
}
