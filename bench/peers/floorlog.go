package main

import (
	"context"
	"sync"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/keyhash"
)

// logFloor is the Decision floor (floordecision.go) of a sliding log: an
// exact log of each key's admissions under 64 locks, answering a whole
// ratelimit.Decision, with the store's hash of a key. It keeps the floors'
// omissions (no validation, bound, expiry or policy change) and the least
// a log can hold: one time a request, every cost 1 (the store keeps each
// entry's cost). What it costs beside go-limiter's GCRA bounds from below
// what a memory store's sliding log costs behind Limiter.Allow.
func logFloor() maker {
	return maker{name: "floor: a sliding log, 64 locks, a Decision", peer: true, open: func(limit int, window time.Duration, _ string) (contender, error) {
		f := newLogFloor(limit, window)
		return contender{close: func() {}, allow: func(_ context.Context, key string) (bool, error) {
			var d ratelimit.Decision
			f.decide(key, &d)
			return d.Allowed, nil
		}}, nil
	}}
}

type logFloorStore struct {
	seed          keyhash.Seed
	start         time.Time
	startMicros   int64
	limit, window int64
	shards        [64]logShard
}

type logShard struct {
	mu   sync.Mutex
	logs map[string]*floorLog
	_    [48]byte
}

// floorLog is a key's admissions, ascending: times[head:] are in the log.
// The buffer is compacted when an append would grow it and a quarter of
// it was pruned, as the store's log is: compacted whenever its oldest
// entry was pruned, a window as long as the buffer was copied on every
// admission, which a floor must not pay.
type floorLog struct {
	times []int64
	head  int
}

func newLogFloor(limit int, window time.Duration) *logFloorStore {
	start := time.Now()
	f := &logFloorStore{seed: keyhash.NewSeed(), start: start, startMicros: start.UnixMicro(), limit: int64(limit), window: window.Microseconds()}
	for i := range f.shards {
		f.shards[i].logs = map[string]*floorLog{}
	}
	return f
}

// decide writes key's decision to d; not inlined, as the Limiter's is not.
//
//go:noinline
func (f *logFloorStore) decide(key string, d *ratelimit.Decision) {
	sh := &f.shards[keyhash.String(f.seed, key)%64]
	now := f.startMicros + int64(time.Since(f.start)/time.Microsecond)
	sh.mu.Lock()
	l := sh.logs[key]
	if l == nil {
		l = &floorLog{}
		sh.logs[key] = l
	}
	if n := len(l.times); n > l.head && l.times[n-1] > now { // a clock behind the key's
		now = l.times[n-1]
	}
	cutoff := now - f.window
	for l.head < len(l.times) && l.times[l.head] <= cutoff {
		l.head++
	}
	count, retry := int64(len(l.times)-l.head), int64(0)
	if count < f.limit {
		if len(l.times) == cap(l.times) && l.head > 0 && l.head >= cap(l.times)/4 {
			l.times = l.times[:copy(l.times, l.times[l.head:])]
			l.head = 0
		}
		l.times = append(l.times, now)
		count++
	} else {
		retry = l.times[len(l.times)-int(f.limit)] + f.window - now
	}
	reset := now
	if count > 0 {
		reset = l.times[l.head] + f.window
	}
	sh.mu.Unlock()
	// The Decision written out, as decisionGCRA.decide writes it: a helper
	// shared by the two was a call more, 20 instructions a decision, and a
	// floor is a bound from below.
	d.Allowed = retry == 0
	d.Limit, d.Remaining, d.Count = int(f.limit), int(f.limit-count), int(count)
	d.ResetAt = time.UnixMicro(reset)
	d.RetryAfter = time.Duration(retry) * time.Microsecond
	d.At = time.UnixMicro(now)
	d.Source = ratelimit.SourceStore
}
