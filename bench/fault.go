package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	goredis "github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/backend/redis"
	"github.com/ratelimit-go/ratelimit/backend/valkey"
	"github.com/ratelimit-go/ratelimit/guard"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// faultCoolDown is the guard's cool-down in the fault runs: a probe every
// 500ms, so the recovery target is at most 1s.
const faultCoolDown = 500 * time.Millisecond

// faultThink is each worker's pause between calls in the fault runs. With no
// pause, 64 workers answered locally at 800,000 decisions per second spin
// both cores, and starve the goroutines of the probes' I/O: probes (and the
// slowest calls) took hundreds of milliseconds longer than the budget. A real
// service does some work between two decisions.
const faultThink = 200 * time.Microsecond

// phaseResult is one row of a fault run; its JSON form is the -json output.
type phaseResult struct {
	Backend    string  `json:"backend"`
	Mode       string  `json:"mode"` // "plain" (fails closed) or "guard" (breaker + local fallback)
	Fault      string  `json:"fault"`
	Phase      string  `json:"phase"` // before, outage, after
	OpsPerSec  float64 `json:"ops_per_sec"`
	P50us      float64 `json:"p50_us"`
	P99us      float64 `json:"p99_us"`
	MaxUs      float64 `json:"max_us"`
	TimeoutUs  int64   `json:"timeout_us"`
	Store      int64   `json:"store"`    // decisions made by the server
	Fallback   int64   `json:"fallback"` // decisions made by the local fallback
	Errors     int64   `json:"errors"`   // calls that got an error (failing closed)
	RecoveryMs *int64  `json:"recovery_ms,omitempty"`
	// On a cluster, where one master is faulted: the decisions on keys of
	// the healthy masters, and how many of them the server made (the rest
	// the fallback, or errors). Exact shards stay at 100%.
	Healthy        *int64 `json:"healthy,omitempty"`
	HealthyByStore *int64 `json:"healthy_by_store,omitempty"`
}

// runFaults runs, for each network backend, the usual load on a throwaway
// server of its own in three phases: before, during an outage (the server
// stalled with SIGSTOP, or killed), and after (resumed, or restarted on the
// same port); once plainly (failing closed) and once through a guard with a
// memory fallback.
func runFaults(cfg config, stdout, progress io.Writer) error {
	if cfg.limit == 0 {
		cfg.limit = maxAutoLimit // a fault run measures failures, not denials
	}
	var rows []phaseResult
	for _, name := range cfg.backends {
		if name == "memory" {
			continue
		}
		for _, mode := range []string{"plain", "guard"} {
			r, err := faultRun(cfg, name, mode, progress)
			if err != nil {
				return fmt.Errorf("%s %s -fault %s: %w", name, mode, cfg.fault, err)
			}
			rows = append(rows, r...)
		}
	}
	if cfg.json {
		for _, r := range rows {
			if err := json.NewEncoder(stdout).Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	fmt.Fprintf(stdout, "\n-fault %s: %d goroutines pausing %v between calls, %d keys, %d per %v, time budget %v, guard cool-down %v, %v per phase\n",
		cfg.fault, cfg.concurrency, faultThink, cfg.keys, cfg.limit, cfg.window, ratelimit.DefaultTimeout, faultCoolDown, cfg.duration)
	tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "backend\tmode\tphase\tops/s\tp50\tp99\tmax\tby store\tby fallback\terrors\trecovery\thealthy shards by store\t")
	for _, r := range rows {
		recovery, healthy := "", ""
		if r.RecoveryMs != nil {
			recovery = fmt.Sprintf("%d ms", *r.RecoveryMs)
		}
		if r.Healthy != nil && *r.Healthy > 0 {
			healthy = fmt.Sprintf("%.1f%% of %s", 100*float64(*r.HealthyByStore)/float64(*r.Healthy), thousands(float64(*r.Healthy)))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Backend, r.Mode, r.Phase, thousands(r.OpsPerSec),
			micros(r.P50us), micros(r.P99us), micros(r.MaxUs), thousands(float64(r.Store)), thousands(float64(r.Fallback)),
			thousands(float64(r.Errors)), recovery, healthy)
	}
	return tw.Flush()
}

func faultRun(cfg config, name, mode string, progress io.Writer) ([]phaseResult, error) {
	binaries := []string{"redis-server", "valkey-server"}
	if strings.HasPrefix(name, "valkey") {
		binaries = []string{"valkey-server", "redis-server"}
	}
	// The faulted server: the one server, or on a cluster its first master
	// (its replica is not promoted within a run: node timeout 30s).
	var faulted *testserver.Server
	addrs := []string{}
	if strings.HasSuffix(name, "-cluster") {
		c, err := testserver.StartCluster(binaries, 30*time.Second)
		if err != nil {
			return nil, err
		}
		defer c.Stop()
		faulted, addrs = c.Masters[0], c.Addrs
	} else {
		srv, err := testserver.StartFromPath(binaries)
		if err != nil {
			return nil, err
		}
		defer srv.Stop()
		faulted, addrs = srv, []string{srv.Addr}
	}
	var store backend.Store
	var err error
	switch name {
	case "redis":
		c := goredis.NewClient(&goredis.Options{Addr: addrs[0], PoolSize: cfg.concurrency, ContextTimeoutEnabled: true})
		defer c.Close()
		store, err = redis.New(c)
	case "redis-cluster":
		c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, PoolSize: cfg.concurrency, ContextTimeoutEnabled: true})
		defer c.Close()
		store, err = redis.New(c)
	case "valkey", "valkey-cluster":
		c, cerr := vk.NewClient(vk.ClientOption{InitAddress: addrs, DisableCache: true, MaxFlushDelay: valkeyFlushDelay})
		if cerr != nil {
			return nil, cerr
		}
		defer c.Close()
		store, err = valkey.New(c)
	default:
		return nil, fmt.Errorf("no fault run for %q", name)
	}
	if err != nil {
		return nil, err
	}
	prefix := "bench:fault:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	// healthy says whether key lives on a master that is not faulted, and
	// whether the store could tell.
	healthy := func(string) (bool, bool) { return false, false }
	if nodeOf := store.Info().Node; nodeOf != nil && strings.HasSuffix(name, "-cluster") {
		healthy = func(key string) (bool, bool) {
			node := nodeOf(prefix, key)
			return node != faulted.Addr, node != ""
		}
	}
	if mode == "guard" {
		local, err := memory.New()
		if err != nil {
			return nil, err
		}
		defer local.Close()
		if store, err = guard.New(store, guard.WithFallback(local, 1), guard.WithCoolDown(faultCoolDown)); err != nil {
			return nil, err
		}
	}
	l, err := ratelimit.New(store, ratelimit.Policy{Limit: cfg.limit, Window: cfg.window, Algorithm: cfg.algorithms[0]},
		ratelimit.WithPrefix(prefix))
	if err != nil {
		return nil, err
	}
	down, up := faulted.Pause, faulted.Resume
	if cfg.fault == "kill" {
		down, up = faulted.Kill, faulted.Restart
	}
	var rows []phaseResult
	for _, phase := range []string{"before", "outage", "after"} {
		fmt.Fprintf(progress, "%s %s -fault %s: %s...\n", name, mode, cfg.fault, phase)
		var back time.Time
		switch phase {
		case "outage":
			err = down()
		case "after":
			err, back = up(), time.Now()
		}
		if err != nil {
			return nil, err
		}
		r := faultPhase(cfg, l, back, healthy)
		r.Backend, r.Mode, r.Fault, r.Phase, r.TimeoutUs = name, mode, cfg.fault, phase, ratelimit.DefaultTimeout.Microseconds()
		rows = append(rows, r)
	}
	return rows, nil
}

// faultPhase runs the load for cfg.duration. After the server's return
// (back is not zero) it also measures the time to the first decision made
// by the server again.
func faultPhase(cfg config, l *ratelimit.Limiter, back time.Time, healthy func(key string) (bool, bool)) phaseResult {
	var (
		mu                    sync.Mutex
		hist                  histogram
		store, fallback, errs atomic.Int64
		onHealthy, healthyOK  atomic.Int64 // on a cluster: calls on healthy masters' keys, and those the server decided
		sharded               atomic.Bool
		firstStore            atomic.Int64 // ns after back
		wg                    sync.WaitGroup
	)
	firstStore.Store(-1)
	began := time.Now()
	stop := began.Add(cfg.duration)
	for g := 0; g < cfg.concurrency; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var h histogram
			for time.Now().Before(stop) {
				key := "user-" + strconv.Itoa(rand.IntN(cfg.keys))
				t0 := time.Now()
				d, err := l.Allow(context.Background(), key)
				h.add(time.Since(t0))
				if ok, known := healthy(key); known {
					sharded.Store(true)
					if ok {
						onHealthy.Add(1)
						if err == nil && d.Source == ratelimit.SourceStore {
							healthyOK.Add(1)
						}
					}
				}
				switch {
				case err != nil:
					errs.Add(1)
					time.Sleep(time.Millisecond) // a failing caller backs off a little
				case d.Source == ratelimit.SourceFallback:
					fallback.Add(1)
				default:
					store.Add(1)
					if !back.IsZero() {
						firstStore.CompareAndSwap(-1, int64(time.Since(back)))
					}
				}
				time.Sleep(faultThink)
			}
			mu.Lock()
			hist.merge(&h)
			mu.Unlock()
		}()
	}
	wg.Wait()
	n := store.Load() + fallback.Load() + errs.Load()
	r := phaseResult{OpsPerSec: float64(n) / time.Since(began).Seconds(), P50us: hist.quantile(0.5), P99us: hist.quantile(0.99),
		MaxUs: float64(hist.max) / float64(time.Microsecond), Store: store.Load(), Fallback: fallback.Load(), Errors: errs.Load()}
	if sharded.Load() {
		n, ok := onHealthy.Load(), healthyOK.Load()
		r.Healthy, r.HealthyByStore = &n, &ok
	}
	if ns := firstStore.Load(); !back.IsZero() && ns >= 0 {
		ms := time.Duration(ns).Milliseconds()
		r.RecoveryMs = &ms
	}
	return r
}
