package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/conformance"
	"github.com/ratelimit-go/ratelimit/servertest/serverinfo"
)

// admission is one admitted request: its key and the time it was decided at
// (Decision.At, on the store's clock), in µs.
type admission struct {
	key int32
	at  int64
}

// worker is one goroutine's record, written without locks or allocations.
type worker struct {
	hist      histogram
	decisions int64
	errors    int64
	lastErr   error
}

// admissions is room for every admission the policy allows, filled through
// an atomic cursor, so that recording never allocates (which would count as
// the limiter's allocations).
type admissions struct {
	slots []admission
	next  atomic.Int64
}

func (a *admissions) add(key int32, at int64) bool {
	i := a.next.Add(1) - 1
	if i >= int64(len(a.slots)) {
		return false
	}
	a.slots[i] = admission{key, at}
	return true
}

func (a *admissions) all() []admission { return a.slots[:min(a.next.Load(), int64(len(a.slots)))] }

// measure runs the load on one backend and algorithm and checks it.
func measure(cfg config, b *target, alg ratelimit.Algorithm, progress io.Writer) (result, error) {
	p := ratelimit.NewPolicy(alg, cfg.limit, cfg.window)
	prefix := "bench:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	l, err := ratelimit.New(b.store, p, ratelimit.WithPrefix(prefix), ratelimit.WithTimeout(cfg.timeout))
	if err != nil {
		return result{}, err
	}
	// A first call connects (a cluster client learns the layout) before
	// the clock runs; it writes nothing.
	_, _ = l.Peek(context.Background(), "warm-up")
	keys := make([]string, cfg.keys)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	decide := func(ctx context.Context, k int32) (ratelimit.Decision, error) { return l.Allow(ctx, keys[k]) }
	if cfg.policies > 1 {
		// Each request under every policy, each on a key of its own (as
		// per-user, per-IP and per-tenant limits are), through Multi.
		ls := []*ratelimit.Limiter{l}
		for i := 1; i < cfg.policies; i++ {
			li, err := ratelimit.New(b.store, p, ratelimit.WithPrefix(prefix), ratelimit.WithTimeout(cfg.timeout))
			if err != nil {
				return result{}, err
			}
			ls = append(ls, li)
		}
		m, err := ratelimit.NewMulti(ls...)
		if err != nil {
			return result{}, err
		}
		perKey := make([][]string, cfg.keys)
		for k := range perKey {
			for i := range cfg.policies {
				perKey[k] = append(perKey[k], keys[k]+"/p"+strconv.Itoa(i))
			}
		}
		decide = func(ctx context.Context, k int32) (ratelimit.Decision, error) {
			md, err := m.Allow(ctx, perKey[k]...)
			return md.Decision, err
		}
	}
	// A sliding window admits at most limit per key in each window (GCRA
	// a burst of limit and limit per window), and a fixed one or a counter
	// twice that around a boundary. This sizes the record of admissions,
	// not what is checked (overAdmissions checks the times decided at): a
	// loaded machine stretches the run past its duration (calls in flight
	// at its end), hence a window more on each side.
	windows := int(cfg.duration/cfg.window) + 4
	if alg == ratelimit.FixedWindow || alg == ratelimit.SlidingWindowCounter {
		windows *= 2
	}
	admitted := &admissions{slots: make([]admission, cfg.keys*cfg.limit*windows)}
	workers := make([]*worker, cfg.concurrency)
	for i := range workers {
		workers[i] = &worker{}
	}

	statsBefore, err := b.commandStats()
	if err != nil {
		return result{}, err
	}
	cpuBefore, err := b.cpuUsec()
	if err != nil {
		return result{}, err
	}
	abusive := cfg.abusive
	var total atomic.Int64
	stopProgress := showProgress(progress, fmt.Sprintf("%s %v", b.name, alg), cfg.duration, &total)
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	// The run's time starts after the GC, which a loaded machine under the
	// race detector can make long.
	ctx, cancel := context.WithTimeout(context.Background(), cfg.duration)
	defer cancel()
	began := time.Now()
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Add(1)
		go func(w *worker, seed uint64) {
			defer wg.Done()
			rng := seed*0x9E3779B97F4A7C15 | 1
			for ctx.Err() == nil {
				rng ^= rng << 13
				rng ^= rng >> 7
				rng ^= rng << 17
				k := int32(rng % uint64(len(keys)))
				if abusive > 0 && float64(rng>>11)/float64(1<<53) < abusive {
					k = 0 // the abusive key
				}
				t0 := time.Now()
				d, err := decide(context.Background(), k)
				w.hist.add(time.Since(t0))
				w.decisions++
				if w.decisions&255 == 0 {
					total.Add(256)
				}
				switch {
				case err != nil:
					w.errors++
					w.lastErr = err
				case d.Allowed:
					if !admitted.add(k, d.At.UnixMicro()) {
						w.errors++ // more admitted than the policy allows in the run
						w.lastErr = fmt.Errorf("more admissions than %d keys x %d per window x %d windows", cfg.keys, cfg.limit, windows)
					}
				}
			}
		}(w, uint64(i+1))
	}
	wg.Wait()
	elapsed := time.Since(began)
	runtime.ReadMemStats(&ms1)
	stopProgress()

	res := result{Backend: b.name, Algorithm: alg.String(), Concurrency: cfg.concurrency, Policies: cfg.policies, Limit: cfg.limit}
	var hist histogram
	var lastErr error
	for _, w := range workers {
		hist.merge(&w.hist)
		res.Decisions += w.decisions
		res.Errors += w.errors
		if w.lastErr != nil {
			lastErr = w.lastErr
		}
	}
	if lastErr != nil {
		fmt.Fprintf(progress, "%s %v: %d errors, for example: %v\n", b.name, alg, res.Errors, lastErr)
	}
	if res.Decisions == 0 { // nothing to report: no ratio, no claim of correctness
		return res, fmt.Errorf("no decision was made in %v", elapsed.Round(time.Millisecond))
	}
	all := admitted.all()
	res.Allowed = int64(len(all))
	res.OpsPerSec = float64(res.Decisions) / elapsed.Seconds()
	res.DeniedShare = float64(res.Decisions-res.Allowed-res.Errors) / float64(res.Decisions)
	res.P50us, res.P99us, res.P999us = hist.quantile(0.50), hist.quantile(0.99), hist.quantile(0.999)
	res.MaxUs = float64(hist.max) / float64(time.Microsecond)
	res.AllocsPerOp = float64(ms1.Mallocs-ms0.Mallocs) / float64(res.Decisions)
	res.OverAdmissions = overAdmissions(all, cfg.keys, p)

	res.RoundtripsPerDecision = "-"
	if statsBefore != nil {
		statsAfter, err := b.commandStats()
		if err != nil {
			return res, err
		}
		res.RoundtripsPerDecision = math.Round(1000*float64(serverinfo.ClientCommands(statsBefore, statsAfter))/float64(res.Decisions)) / 1000
		res.ServerUsPerDecision = math.Round(100*float64(scriptUsec(statsBefore, statsAfter))/float64(res.Decisions)) / 100
		cpuAfter, err := b.cpuUsec()
		if err != nil {
			return res, err
		}
		res.ServerCPUUsPerDecision = math.Round(100*float64(cpuAfter-cpuBefore)/float64(res.Decisions)) / 100
	}
	if res.BytesPerKey, err = b.bytesPerKey(p, prefix+"size:"); err != nil {
		return res, err
	}
	return res, nil
}

// maxAutoLimit is the largest limit pickLimit picks: a fast backend (the
// memory store) then denies most of its decisions, as under abuse, while
// the admissions the run records stay a few million at most.
const maxAutoLimit = 100

// pickLimit picks a limit for b under alg at which about half of the
// decisions of the load are denials: a short run at maxAutoLimit measures
// the decisions per second, and the limit is half of what each key then
// asks per window (1 at least, maxAutoLimit at most). At a fixed limit, a
// server's rows admitted everything (no key reached 100 per second at
// 30,000 decisions per second over 1,000 keys), which tested no limit.
func pickLimit(cfg config, b *target, alg ratelimit.Algorithm, progress io.Writer) (int, error) {
	probe := cfg
	probe.duration, probe.limit = min(cfg.duration, 500*time.Millisecond), maxAutoLimit
	st := newStatus(progress)
	st.line(fmt.Sprintf("picking a limit for %s %v: %v at %d per %v", b.name, alg, probe.duration, probe.limit, cfg.window))
	res, err := measure(probe, b, alg, io.Discard)
	st.clear()
	if err != nil {
		return 0, err
	}
	perKey := res.OpsPerSec * cfg.window.Seconds() / float64(cfg.keys)
	return int(max(1, min(maxAutoLimit, math.Round(perKey/2)))), nil
}

// overAdmissions counts, over all keys, where p was exceeded (see
// conformance.OverAdmissions).
func overAdmissions(all []admission, keys int, p ratelimit.Policy) int64 {
	perKey := make([][]int64, keys)
	for _, a := range all {
		perKey[a.key] = append(perKey[a.key], a.at)
	}
	var over int64
	for _, times := range perKey {
		over += int64(conformance.OverAdmissions(times, p))
	}
	return over
}

// showProgress tells progress what runs until stop is called: on a
// terminal, a line redrawn every second; elsewhere (a log file, a pipe), one
// line when the step starts.
func showProgress(w io.Writer, what string, d time.Duration, total *atomic.Int64) (stop func()) {
	st := newStatus(w)
	if !st.tty {
		st.line(fmt.Sprintf("running %s for %v", what, d))
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	began := time.Now()
	go func() {
		defer close(finished)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				st.clear()
				return
			case <-tick.C:
				st.line(fmt.Sprintf("running %s: %v of %v, %s decisions", what,
					time.Since(began).Round(time.Second), d, thousands(float64(total.Load()))))
			}
		}
	}()
	return func() { close(done); <-finished }
}

// status writes progress lines to w: redrawn in place with a carriage
// return on a terminal, one line each elsewhere.
type status struct {
	w   io.Writer
	tty bool
}

func newStatus(w io.Writer) status {
	f, ok := w.(*os.File)
	if !ok {
		return status{w: w}
	}
	info, err := f.Stat()
	return status{w: w, tty: err == nil && info.Mode()&os.ModeCharDevice != 0}
}

// line shows s: in place of the last line on a terminal, as a new line
// elsewhere.
func (st status) line(s string) {
	if st.tty {
		fmt.Fprintf(st.w, "\r%-80s", s)
		return
	}
	fmt.Fprintln(st.w, s)
}

// clear erases the line drawn in place on a terminal.
func (st status) clear() {
	if st.tty {
		fmt.Fprintf(st.w, "\r%-80s\r", "")
	}
}

// histogram of latencies: 32 linear sub-buckets per power of two of
// nanoseconds (3% resolution), fixed size, no allocation.
type histogram struct {
	counts [64 * 32]uint64
	max    time.Duration // the slowest, exactly
}

func bucketOf(ns uint64) int {
	if ns < 32 {
		return int(ns)
	}
	exp := bits.Len64(ns) - 6 // ns>>exp is in [32, 64)
	return (exp+1)*32 + int(ns>>exp) - 32
}

func lowerBound(b int) float64 {
	if b < 32 {
		return float64(b)
	}
	exp := b/32 - 1
	return float64(uint64(32+b%32) << exp)
}

func (h *histogram) add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.max = max(h.max, d)
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.max = max(h.max, o.max)
}

// quantile in µs.
func (h *histogram) quantile(q float64) float64 {
	var n uint64
	for _, c := range h.counts {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			return lowerBound(b) / 1000
		}
	}
	return 0
}
