package main

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// The floors are reference rows of the memory scenarios, not limiters to
// ship: an exact GCRA per key, one monotonic clock read a decision, and
// nothing else. They have none of a store's duties: no validation, no
// bound on keys (they never forget one), no expiry, no reset time or
// count, no policy change, no Decision, no layer between the caller and
// the arithmetic. They are what an in-process decision costs at the least
// under each of three designs (a lock per shard, none, a lock per key), so
// that the memory cells can be read against them: what a row spends beyond
// its design's floor is what it does beyond it.
//
// A key's bucket holds level units: a request adds window units, the bucket
// drains limit units a µs and holds at most limit*window (a burst of
// limit), so that the arithmetic is exact in integers.

// memoryFloor is the memory store's design at its least: the keys' states
// in Go maps under 64 mutexes, a key's decision under its shard's lock.
func memoryFloor() maker {
	return maker{name: "floor: a GCRA map under 64 locks", peer: true, open: func(limit int, window time.Duration, _ string) (contender, error) {
		f := &gcraFloor{seed: maphash.MakeSeed(), start: time.Now(), limit: int64(limit), window: window.Microseconds()}
		for i := range f.shards {
			f.shards[i].states = map[string]*floorState{}
		}
		return contender{close: func() {}, allow: func(_ context.Context, key string) (bool, error) {
			return f.take(key), nil
		}}, nil
	}}
}

// gcraFloor is memoryFloor's limiter; a state's level was written at at (µs
// since start).
type gcraFloor struct {
	seed          maphash.Seed
	start         time.Time
	limit, window int64
	shards        [64]floorShard
}

type floorShard struct {
	mu     sync.Mutex
	states map[string]*floorState
	_      [48]byte // a shard's lock on a line of its own
}

// floorState is a key's state under memoryFloor, on a line of its own (a
// 64-byte object is allocated at a multiple of 64), as each floor's.
type floorState struct {
	at, level int64
	_         [48]byte
}

func (f *gcraFloor) take(key string) bool {
	sh := &f.shards[maphash.String(f.seed, key)%uint64(len(f.shards))]
	now := int64(time.Since(f.start) / time.Microsecond)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st := sh.states[key]
	if st == nil {
		st = &floorState{}
		sh.states[key] = st
	}
	level, ok := admit(st.at, st.level, now, f.limit, f.window)
	if ok {
		st.at, st.level = now, level
	}
	return ok
}

// admit is the floors' GCRA: the level at now of a bucket that held level
// at at, with a request's window units added, and whether it fits under
// limit's burst; false changes nothing.
func admit(at, level, now, limit, window int64) (int64, bool) {
	level = max(level-(now-at)*limit, 0) + window
	return level, level <= limit*window
}

// casFloor is the design with no lock: a key's state one word, its
// bucket's empty time in units (level + at*limit, at in µs since start),
// changed by a compare-and-swap; the keys in a sync.Map, read without a
// lock. It takes no turn with another key's decision and writes one word
// a decision, where a lock writes two more (its own, taken and released).
// Each word has a line of its own, so that two keys' decisions on the two
// cores move no line between them.
func casFloor() maker {
	return maker{name: "floor: a GCRA word per key, compare-and-swap", peer: true, open: func(limit int, window time.Duration, _ string) (contender, error) {
		var states sync.Map // string -> *casState
		start, l, w := time.Now(), int64(limit), window.Microseconds()
		return contender{close: func() {}, allow: func(_ context.Context, key string) (bool, error) {
			v, ok := states.Load(key)
			if !ok {
				v, _ = states.LoadOrStore(key, new(casState))
			}
			empty := &v.(*casState).empty
			now := int64(time.Since(start)/time.Microsecond) * l
			for {
				e := empty.Load()
				level := max(e-now, 0)
				if level+w > l*w {
					return false, nil
				}
				if empty.CompareAndSwap(e, now+level+w) {
					return true, nil
				}
			}
		}}, nil
	}}
}

// keyLockFloor is the design between the two: a lock per key, on the line
// of the state it guards (as go-limiter's), the keys in a sync.Map read
// without a lock. An admission moves one line, as the compare-and-swap's
// does, and decides under a lock, as the store's algorithms expect.
func keyLockFloor() maker {
	return maker{name: "floor: a lock per key", peer: true, open: func(limit int, window time.Duration, _ string) (contender, error) {
		var states sync.Map
		start, l, w := time.Now(), int64(limit), window.Microseconds()
		return contender{close: func() {}, allow: func(_ context.Context, key string) (bool, error) {
			v, ok := states.Load(key)
			if !ok {
				v, _ = states.LoadOrStore(key, new(keyLockState))
			}
			st := v.(*keyLockState)
			now := int64(time.Since(start) / time.Microsecond)
			st.mu.Lock()
			defer st.mu.Unlock()
			level, ok := admit(st.at, st.level, now, l, w)
			if ok {
				st.at, st.level = now, level
			}
			return ok, nil
		}}, nil
	}}
}

// casState is a key's state under casFloor, on a line of its own.
type casState struct {
	empty atomic.Int64
	_     [56]byte
}

// keyLockState is a key's state and its lock under keyLockFloor, on a line
// of their own.
type keyLockState struct {
	mu        sync.Mutex
	at, level int64
	_         [40]byte
}
