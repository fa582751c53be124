// Command bench runs every chosen backend and algorithm under the same load,
// side by side, and checks the result: throughput, latency per decision,
// allocations, round trips per decision and bytes per key (measured, not
// assumed), and over-admissions (where an algorithm admitted more than it
// allows: see conformance.OverAdmissions; must be 0).
//
//	go run ./bench                      # memory store, every algorithm, no server needed
//	go run ./bench -algorithm gcra      # one of sliding, fixed, counter, gcra
//	go run ./bench -backend all         # memory, redis and valkey (starts a throwaway server)
//	go run ./bench -backend redis -addr 127.0.0.1:6379 -json
//	go run ./bench -plot burst.svg      # fixed vs sliding at a window boundary
//	go run ./bench -backend redis -fault stall   # a server stalled mid-run, with and without guard
//	go run ./bench -backend redis-cluster -fault stall  # one master of three stalled: the others stay exact
//	go run ./bench -backend redis-cluster        # three masters and three replicas (or -addr a,b,c)
//	go run ./bench -backend redis -abusive 0.9 -nearcache   # 90% of requests on one denied key, with and without a nearcache
//	go run ./bench -backend all -policies 3    # three limits on three keys per request, through Multi
//	go run ./bench -backend valkey-cluster -replicas 1     # also with every write acknowledged by a replica (WAIT)
//
// When redis-benchmark is on PATH, the network backends are followed by a
// reference row: redis-benchmark running the same script by EVALSHA on the
// same server with as many connections (and, for Valkey, pipelined by 16).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
)

type config struct {
	backends    []string
	algorithms  []ratelimit.Algorithm
	addr        string
	concurrency int
	duration    time.Duration
	keys        int
	limit       int
	window      time.Duration
	json        bool
	plot        string
	fault       string
	abusive     float64       // the share of requests on one abusive key
	nearcache   bool          // also run every backend behind a nearcache
	replicas    int           // also run every network backend with its writes acknowledged by this many replicas
	timeout     time.Duration // the Limiters' time budget
	policies    int           // policies per request, each on its own key, decided together by Multi
}

// result is one line of the report; its JSON form is the -json output.
type result struct {
	Backend               string  `json:"backend"`
	Algorithm             string  `json:"algorithm"`
	Concurrency           int     `json:"concurrency"`
	Policies              int     `json:"policies"` // per request, through Multi: a decision is a request
	OpsPerSec             float64 `json:"ops_per_sec"`
	P50us                 float64 `json:"p50_us"`
	P99us                 float64 `json:"p99_us"`
	P999us                float64 `json:"p999_us"`
	MaxUs                 float64 `json:"max_us"`
	AllocsPerOp           float64 `json:"allocs_per_op"`
	RoundtripsPerDecision any     `json:"roundtrips_per_decision"` // a number, or "-" for memory
	// ServerUsPerDecision is the server's time in the scripts per decision
	// (INFO commandstats, summed over a cluster's masters); 0 for memory.
	ServerUsPerDecision float64 `json:"server_us_per_decision"`
	// ServerCPUUsPerDecision is the masters' CPU time per decision (INFO
	// cpu): the scripts' time and the I/O and replication around them, what
	// decides how many decisions a core sustains (docs/scaling.md); 0 for
	// memory.
	ServerCPUUsPerDecision float64 `json:"server_cpu_us_per_decision"`
	BytesPerKey            int64   `json:"bytes_per_key"`
	Decisions              int64   `json:"decisions"`
	Allowed                int64   `json:"allowed"`
	// Limit is the policy's limit in this row: -limit, or the one picked
	// for the backend (see pickLimit).
	Limit int `json:"limit"`
	// DeniedShare is the share of the decisions that were denials: a row
	// that denies nothing tests no limit.
	DeniedShare float64 `json:"denied_share"`
	// OpsPerSecRuns are a reference's repeated runs; OpsPerSec is their
	// median.
	OpsPerSecRuns  []float64 `json:"ops_per_sec_runs,omitempty"`
	OverAdmissions int64     `json:"over_admissions"`
	Errors         int64     `json:"errors"`
	// Reference rows (redis-benchmark) fill only OpsPerSec and Backend.
	reference bool
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if err := run(cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	backendFlag := fs.String("backend", "memory", "memory, redis, valkey, redis-cluster, valkey-cluster, or all (the first three)")
	alg := fs.String("algorithm", "all", "sliding, fixed, counter, gcra or all")
	cfg := config{}
	fs.StringVar(&cfg.addr, "addr", "", "host:port of the server for redis/valkey, or the comma-separated nodes of a cluster (default: start a throwaway redis-server/valkey-server from PATH, or for a -cluster backend three masters and three replicas)")
	fs.IntVar(&cfg.concurrency, "concurrency", 64, "goroutines making requests")
	fs.DurationVar(&cfg.duration, "duration", 3*time.Second, "how long each backend and algorithm runs")
	fs.IntVar(&cfg.keys, "keys", 1000, "distinct keys, picked at random per request")
	fs.IntVar(&cfg.limit, "limit", 0, "the policy's limit (default: picked per backend so that about half of its decisions are denials, at most 100)")
	fs.DurationVar(&cfg.window, "window", time.Second, "the policy's window")
	fs.DurationVar(&cfg.timeout, "timeout", ratelimit.DefaultTimeout, "the Limiters' time budget (ratelimit.WithTimeout); a decision that misses it is an error")
	fs.BoolVar(&cfg.json, "json", false, "print one JSON object per result instead of tables")
	fs.StringVar(&cfg.fault, "fault", "", "stall or kill: run the load on a throwaway server stalled (SIGSTOP) or killed in the middle and brought back, plainly and through a guard with a local fallback")
	fs.Float64Var(&cfg.abusive, "abusive", 0, "the share of requests (0 to 1) that go to one abusive key, denied nearly always")
	fs.BoolVar(&cfg.nearcache, "nearcache", false, "also run every backend behind a nearcache of denials (rows named backend+nearcache)")
	fs.IntVar(&cfg.replicas, "replicas", 0, "also run every network backend with its writes acknowledged by this many replicas (WithReplicaAck, rows named backend+ackN): a cluster backend, or -addr of a server with replicas")
	fs.IntVar(&cfg.policies, "policies", 1, "policies per request, each on a key of its own (user-1/p0, user-1/p1, ...), decided together through ratelimit.Multi: the cost of a request that several limits apply to")
	fs.StringVar(&cfg.plot, "plot", "", "draw admitted requests per tenth of a window, fixed vs sliding, for a client bursting at a boundary, into this SVG file")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	switch *backendFlag {
	case "memory", "redis", "valkey", "redis-cluster", "valkey-cluster":
		cfg.backends = []string{*backendFlag}
	case "all":
		cfg.backends = []string{"memory", "redis", "valkey"}
	default:
		return cfg, fmt.Errorf("-backend %q: want memory, redis, valkey, redis-cluster, valkey-cluster or all", *backendFlag)
	}
	if cfg.abusive < 0 || cfg.abusive > 1 {
		return cfg, fmt.Errorf("-abusive %v: want a share from 0 to 1", cfg.abusive)
	}
	if cfg.policies < 1 || cfg.policies > 16 {
		return cfg, fmt.Errorf("-policies %d: want 1 to 16", cfg.policies)
	}
	for _, a := range backend.Algorithms() {
		if *alg == "all" || *alg == a.String() {
			cfg.algorithms = append(cfg.algorithms, a)
		}
	}
	if len(cfg.algorithms) == 0 {
		return cfg, fmt.Errorf("-algorithm %q: want sliding, fixed, counter, gcra or all", *alg)
	}
	for _, a := range cfg.algorithms {
		limit := cfg.limit
		if limit == 0 {
			limit = maxAutoLimit
		}
		if err := ratelimit.NewPolicy(a, limit, cfg.window).Validate(); err != nil {
			return cfg, err
		}
	}
	switch {
	case cfg.replicas < 0:
		return cfg, fmt.Errorf("-replicas %d: want 0 or more", cfg.replicas)
	case cfg.fault != "" && cfg.fault != "stall" && cfg.fault != "kill":
		return cfg, fmt.Errorf("-fault %q: want stall or kill", cfg.fault)
	case cfg.fault != "" && cfg.addr != "":
		return cfg, errors.New("-fault needs a throwaway server of its own: drop -addr")
	case cfg.fault != "" && *backendFlag == "memory":
		return cfg, errors.New("-fault needs a server: -backend redis, valkey, redis-cluster, valkey-cluster or all")
	}
	if cfg.concurrency < 1 || cfg.keys < 1 || cfg.duration <= 0 {
		return cfg, errors.New("-concurrency, -keys and -duration must be positive")
	}
	return cfg, nil
}

func run(cfg config, stdout, progress io.Writer) error {
	if cfg.fault != "" {
		return runFaults(cfg, stdout, progress)
	}
	if cfg.plot != "" {
		if err := writePlot(cfg.plot, cfg.limit, cfg.window); err != nil {
			return err
		}
		fmt.Fprintf(progress, "wrote %s\n", cfg.plot)
	}
	var servers servers
	defer servers.stopAll()
	byAlg := map[ratelimit.Algorithm][]result{}
	for _, name := range cfg.backends {
		b, err := openBackend(name, cfg.addr, &servers)
		if err != nil {
			return err
		}
		for _, alg := range cfg.algorithms {
			cfg := cfg
			if cfg.limit == 0 {
				if cfg.limit, err = pickLimit(cfg, b, alg, progress); err != nil {
					b.close()
					return fmt.Errorf("%s %v: %w", name, alg, err)
				}
			}
			res, err := measure(cfg, b, alg, progress)
			if err != nil {
				b.close()
				return fmt.Errorf("%s %v: %w", name, alg, err)
			}
			rows := []result{res}
			if cfg.nearcache {
				cached, err := b.cached()
				if err == nil {
					res, err = measure(cfg, cached, alg, progress)
					cached.close()
				}
				if err != nil {
					b.close()
					return fmt.Errorf("%s+nearcache %v: %w", name, alg, err)
				}
				rows = append(rows, res)
			}
			if cfg.replicas > 0 && b.acked != nil {
				ab, err := b.withAck(cfg.replicas)
				var res result
				if err == nil {
					res, err = measure(cfg, ab, alg, progress)
				}
				if err != nil {
					b.close()
					return fmt.Errorf("%s+ack%d %v: %w", name, cfg.replicas, alg, err)
				}
				rows = append(rows, res)
			}
			if ref, ok := b.reference(cfg, alg, rows[0].OpsPerSec, progress); ok {
				rows = append(rows, ref...)
			}
			for _, r := range rows {
				if cfg.json {
					if err := json.NewEncoder(stdout).Encode(r); err != nil {
						return err
					}
				}
			}
			byAlg[alg] = append(byAlg[alg], rows...)
		}
		b.close()
	}
	if !cfg.json {
		printTables(stdout, cfg, byAlg)
	}
	for _, rows := range byAlg {
		for _, r := range rows {
			if r.OverAdmissions > 0 || (r.Errors > 0 && !acked(r)) {
				return fmt.Errorf("%s %s: %d over-admissions, %d errors", r.Backend, r.Algorithm, r.OverAdmissions, r.Errors)
			}
		}
	}
	return nil
}

func printTables(w io.Writer, cfg config, byAlg map[ratelimit.Algorithm][]result) {
	for _, alg := range cfg.algorithms {
		per := ""
		if cfg.policies > 1 {
			per = fmt.Sprintf(", %d policies a request on keys of their own (Multi: a decision is a request)", cfg.policies)
		}
		fmt.Fprintf(w, "\n%v per %v, %d goroutines, %d keys, %v per backend%s\n", alg, cfg.window, cfg.concurrency, cfg.keys, cfg.duration, per)
		tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "backend\tlimit\tops/s\tp50\tp99\tp99.9\tmax\tallocs/op\troundtrips/decision\tserver µs/decision\tserver CPU µs/decision\tbytes/key\tdecisions\tdenied\tcorrect\t")
		var base float64
		for _, r := range byAlg[alg] {
			if r.reference {
				ratio := ""
				if r.OpsPerSec > 0 {
					ratio = fmt.Sprintf("(backend at %.0f%% of the median of %d runs, %s to %s)", 100*base/r.OpsPerSec, len(r.OpsPerSecRuns),
						thousands(slices.Min(r.OpsPerSecRuns)), thousands(slices.Max(r.OpsPerSecRuns)))
				}
				fmt.Fprintf(tw, "%s\t\t%s\t\t\t\t\t\t\t\t\t\t\t\t%s\t\n", r.Backend, thousands(r.OpsPerSec), ratio)
				continue
			}
			if !strings.HasSuffix(r.Backend, "+nearcache") && !strings.Contains(r.Backend, "+ack") { // the reference measures the store itself
				base = r.OpsPerSec
			}
			correct := "yes: 0 over-admissions"
			switch {
			case r.OverAdmissions > 0 || (r.Errors > 0 && !acked(r)):
				correct = fmt.Sprintf("NO: %d over-admissions, %d errors", r.OverAdmissions, r.Errors)
			case r.Errors > 0:
				correct += fmt.Sprintf(", %d writes not acknowledged within the budget", r.Errors)
			}
			server, cpu := "-", "-"
			if r.ServerUsPerDecision > 0 {
				server, cpu = fmt.Sprintf("%.1f", r.ServerUsPerDecision), fmt.Sprintf("%.1f", r.ServerCPUUsPerDecision)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%.1f\t%v\t%s\t%s\t%s\t%s\t%.1f%%\t%s\t\n", r.Backend, r.Limit, thousands(r.OpsPerSec),
				micros(r.P50us), micros(r.P99us), micros(r.P999us), micros(r.MaxUs), r.AllocsPerOp, r.RoundtripsPerDecision, server, cpu, thousands(float64(r.BytesPerKey)),
				thousands(float64(r.Decisions)), 100*r.DeniedShare, correct)
		}
		tw.Flush()
	}
}

func micros(us float64) string {
	if us < 10 {
		return fmt.Sprintf("%.2fµs", us)
	}
	return fmt.Sprintf("%.0fµs", us)
}

// thousands formats n rounded, with thousands separators.
func thousands(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// acked reports a run whose writes wait for replicas (-replicas): a write
// they did not acknowledge within the budget is an error by design, which
// the run reports rather than fails on.
func acked(r result) bool { return strings.Contains(r.Backend, "+ack") }
