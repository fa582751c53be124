package rlqs

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"sync"
	"time"
)

// Ledger keeps the shares of every bucket: where the Allocator of each
// lives. In process (NewMemoryLedger) for one ratelimitd instance; on a
// Redis or Valkey server (NewScriptLedger) for every instance that serves
// the planes of one fleet, which then share one allocation.
type Ledger interface {
	// Grant records that plane asked for demand requests a window on
	// bucket (a bucketKey), whose rule allows limit a window, and returns
	// the grant to send it, held for ttl.
	Grant(ctx context.Context, bucket string, window time.Duration, limit int64, ttl time.Duration, plane string, demand int64) (int64, error)
	// Forget records that plane's stream ended (Allocator.Forget).
	Forget(ctx context.Context, bucket string, window time.Duration, ttl time.Duration, plane string) error
}

// MaxPlanes bounds the planes one bucket counts: a plane the bucket does
// not know yet when it counts as many is granted nothing (DENY_ALL) and
// not recorded, so that the work of each report, which reads every plane
// of its bucket, stays bounded whatever the streams clients open.
const MaxPlanes = 1000

// memoryLedger is a Ledger of Allocators in this process, on its clock.
type memoryLedger struct {
	now     func() time.Time
	mu      sync.Mutex
	buckets map[string]*memoryBucket
	swept   time.Time // when idle buckets were last dropped
}

type memoryBucket struct {
	window time.Duration
	alloc  *Allocator
}

// NewMemoryLedger returns a ledger in this process on the clock now (nil:
// time.Now). Its buckets live as long as it does.
func NewMemoryLedger(now func() time.Time) Ledger {
	if now == nil {
		now = time.Now
	}
	return &memoryLedger{now: now, buckets: map[string]*memoryBucket{}}
}

func (l *memoryLedger) bucket(key string, window time.Duration, limit int64, ttl time.Duration) *memoryBucket {
	b := l.buckets[key]
	switch {
	case b == nil:
		b = &memoryBucket{window: window, alloc: NewAllocator(limit, ttl)}
		l.buckets[key] = b
	case b.window != window: // reloaded with another window: the holds keep their rates
		b.alloc.Rescale(limit, float64(window)/float64(b.window))
		b.window = window
	default:
		b.alloc.SetLimit(limit)
	}
	b.alloc.ttl = ttl
	return b
}

func (l *memoryLedger) Grant(_ context.Context, key string, window time.Duration, limit int64, ttl time.Duration, plane string, demand int64) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.sweep(now, ttl)
	a := l.bucket(key, window, limit, ttl).alloc
	if _, known := a.planes[plane]; !known && len(a.planes) >= MaxPlanes {
		return 0, nil
	}
	a.Report(plane, demand, now)
	return a.Assign(now, plane)[plane], nil
}

// sweep drops the buckets no plane is known on, once a TTL at most: the
// ledger holds the buckets of live planes and of holds not yet ended.
func (l *memoryLedger) sweep(now time.Time, ttl time.Duration) {
	if now.Sub(l.swept) < ttl {
		return
	}
	l.swept = now
	for k, b := range l.buckets {
		if b.alloc.Idle(now) {
			delete(l.buckets, k)
		}
	}
}

func (l *memoryLedger) Forget(_ context.Context, key string, window time.Duration, ttl time.Duration, plane string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.buckets[key]; b != nil {
		b.alloc.Forget(plane)
	}
	return nil
}

//go:embed ledger.lua
var ledgerLua string

// LedgerScript is the text of the script NewScriptLedger's eval runs.
var LedgerScript = ledgerLua

// Eval runs LedgerScript on a server with keys and args, and returns its
// integer reply: go-redis's Script.Run or valkey-go's LuaScript.Exec.
type Eval func(ctx context.Context, keys []string, args ...any) (int64, error)

// scriptLedger is a Ledger on a server: a hash a bucket, the allocation's
// rules run by LedgerScript on the server's clock, atomically, for every
// instance at once.
type scriptLedger struct {
	eval   Eval
	prefix string
}

// NewScriptLedger returns a ledger on the server eval runs the script on;
// its keys start with prefix, and each holds its hash tag (one key a
// call: cluster-safe).
func NewScriptLedger(eval Eval, prefix string) Ledger {
	return &scriptLedger{eval: eval, prefix: prefix}
}

// key is a bucket's hash: its name hashed (a bucket key may be long), in
// braces.
func (l *scriptLedger) key(bucket string) string {
	h := sha256.Sum256([]byte(bucket))
	return l.prefix + "{" + hex.EncodeToString(h[:16]) + "}"
}

func (l *scriptLedger) Grant(ctx context.Context, bucket string, window time.Duration, limit int64, ttl time.Duration, plane string, demand int64) (int64, error) {
	n, err := l.eval(ctx, []string{l.key(bucket)}, plane, demand, limit, ttl.Milliseconds(), "grant", window.Milliseconds(), MaxPlanes)
	if err != nil {
		return 0, fmt.Errorf("rlqs: the shares of a bucket: %w", err)
	}
	return n, nil
}

func (l *scriptLedger) Forget(ctx context.Context, bucket string, window time.Duration, ttl time.Duration, plane string) error {
	if _, err := l.eval(ctx, []string{l.key(bucket)}, plane, 0, 0, ttl.Milliseconds(), "forget", window.Milliseconds(), MaxPlanes); err != nil {
		return fmt.Errorf("rlqs: forgetting a plane: %w", err)
	}
	return nil
}
