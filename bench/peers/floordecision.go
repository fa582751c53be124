package main

import (
	"context"
	"hash/maphash"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// decisionFloor is the floor under 64 locks (memoryFloor) answering as the
// Limiter does: a whole ratelimit.Decision, exact (Count, Remaining, Limit,
// ResetAt, RetryAfter, At), written into the caller's variable. It keeps
// every other floor's omissions (no validation, bound, expiry or policy
// change) and adds the one duty no store can drop while the Decision keeps
// its shape, so that it bounds from below what any memory store costs
// behind Limiter.Allow: a cell the Decision floor misses, no store meets.
//
// Its GCRA is the store's (package algorithm): a request weighs unit, a µs
// drains drain, both the window's and the limit's over their gcd, so that
// a limit dividing its window divides nothing on the hot path.
func decisionFloor() maker {
	return maker{name: "floor: 64 locks, with a Decision", peer: true, open: func(limit int, window time.Duration, _ string) (contender, error) {
		f := newDecisionGCRA(limit, window)
		return contender{close: func() {}, allow: func(_ context.Context, key string) (bool, error) {
			var d ratelimit.Decision
			f.decide(key, &d)
			return d.Allowed, nil
		}}, nil
	}}
}

func newDecisionGCRA(limit int, window time.Duration) *decisionGCRA {
	w, l := window.Microseconds(), int64(limit)
	g, start := gcd(w, l), time.Now()
	f := &decisionGCRA{gcraFloor: gcraFloor{seed: maphash.MakeSeed(), start: start, limit: l, window: w}, startMicros: start.UnixMicro(), unit: w / g, drain: l / g}
	for i := range f.shards {
		f.shards[i].states = map[string]*floorState{}
	}
	return f
}

type decisionGCRA struct {
	gcraFloor
	startMicros int64
	unit, drain int64
}

// decide writes key's decision to d. It is not inlined, as Limiter.Allow's
// own path is not: inlined, the compiler would drop the fields the
// contender does not read.
//
//go:noinline
func (f *decisionGCRA) decide(key string, d *ratelimit.Decision) {
	sh := &f.shards[maphash.String(f.seed, key)%uint64(len(f.shards))]
	since := int64(time.Since(f.start) / time.Microsecond)
	sh.mu.Lock()
	st := sh.states[key]
	if st == nil {
		st = &floorState{}
		sh.states[key] = st
	}
	capacity := f.limit * f.unit
	level := st.level - (since-st.at)*f.drain
	level = max(level, 0)
	var retry int64
	if level+f.unit <= capacity {
		level += f.unit
		st.at, st.level = since, level
	} else {
		retry = ceilDiv(level+f.unit-capacity, f.drain)
	}
	sh.mu.Unlock()
	now := f.startMicros + since
	count, reset := int64(0), now
	if level > 0 {
		count = f.limit // a full bucket, the common denial: no division
		if capacity-level >= f.unit {
			count = ceilDiv(level, f.unit)
		}
		reset = now + ceilDiv(level-(count-1)*f.unit, f.drain)
	}
	d.Allowed = retry == 0
	d.Limit, d.Remaining, d.Count = int(f.limit), int(f.limit-count), int(count)
	d.ResetAt = time.UnixMicro(reset)
	d.RetryAfter = time.Duration(retry) * time.Microsecond
	d.At = time.UnixMicro(now)
	d.Source = ratelimit.SourceStore
}

// ceilDiv is ceil(a/b) for a >= 0, b > 0, with no division by 1.
func ceilDiv(a, b int64) int64 {
	if b == 1 {
		return a
	}
	return (a + b - 1) / b
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
