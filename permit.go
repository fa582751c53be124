package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/ratelimit-go/ratelimit/algorithm"
	"github.com/ratelimit-go/ratelimit/backend"
)

// Permit is a permit of an InFlight policy (Concurrency) held for work in
// progress. While held it renews its lease every third of the lease, in
// the background, so a long request keeps it; Release gives it back. A
// holder that crashes stops renewing, and its permit comes back to the
// others when its lease ends. A renewal that fails (the store down) is
// tried again at the next third; once the lease has ended the permit may
// be someone else's, so work that must never exceed the limit stops when
// Lost says so.
type Permit struct {
	l      *Limiter
	policy Policy
	req    backend.Request
	id     int64

	mu       sync.Mutex
	timer    *time.Timer
	released bool
	lost     bool
}

// Acquire takes a permit of key under the Limiter's InFlight policy
// (Concurrency): a nil Permit when every one is held, the Decision saying
// how many are and when the first lease ends (RetryAfter, should none be
// renewed). Release the permit when the work is done (a deferred Release
// is the usual way). A failure mode's admission (WithFailOpen) comes with
// a Permit that holds nothing. A policy that is no InFlight one is
// ErrInvalidPolicy.
func (l *Limiter) Acquire(ctx context.Context, key string) (*Permit, Decision, error) {
	if err := checkArgs(ctx, key); err != nil {
		return nil, Decision{}, err
	}
	var req backend.Request
	c, err := l.request(ctx, key, 1, &req)
	if err != nil {
		return nil, Decision{}, err
	}
	if c.policy.Algorithm != InFlight {
		return nil, Decision{}, fmt.Errorf("%w: %v is no InFlight policy: take from it (AllowN)", ErrInvalidPolicy, c.policy)
	}
	p := &Permit{l: l, policy: c.policy, req: req, id: permitID()}
	began := time.Now()
	sctx, budget := l.budget(ctx, began)
	out, err := l.store.Acquire(sctx, req, p.id)
	budget.end()
	d, err := l.settle(ctx, c, req, OpAcquire, true, &out, err, began)
	switch {
	case err != nil || !d.Allowed:
		return nil, d, err
	case d.Source == SourceFailOpen, !out.Allowed(): // a failure mode's or a dry run's admission
		p.released = true // holds nothing: nothing to renew or give back
	default:
		p.mu.Lock() // renew reads the timer under the lock: it may fire at once
		p.timer = time.AfterFunc(p.every(), p.renew)
		p.mu.Unlock()
	}
	return p, d, nil
}

// permitID is a random id in [1, algorithm.MaxPermitID]: two holders of
// one key share one with a chance of one in 2^53 per pair.
func permitID() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return int64(binary.LittleEndian.Uint64(b[:])%uint64(algorithm.MaxPermitID)) + 1
}

// every is how often the permit renews its lease: a third of it.
func (p *Permit) every() time.Duration {
	return max(time.Duration(p.req.Rule.Window())*time.Microsecond/3, time.Millisecond)
}

// renew renews the lease, then waits another third of it.
func (p *Permit) renew() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released {
		return
	}
	ctx, budget := p.l.budget(context.Background(), time.Now())
	defer budget.end()
	req := p.req
	req.Now = 0
	if p.l.clock != nil {
		req.Now = p.l.clock().UnixMicro()
	}
	out, err := p.l.store.Acquire(ctx, req, p.id)
	if err == nil && !out.Allowed() { // the lease ended and every permit is someone else's
		p.lost = true
		return
	}
	p.timer.Reset(p.every())
}

// Lost reports whether the permit's lease ended before a renewal could
// renew it and another holder took its place: the work it guards runs
// past the limit. (A renewal that failed is tried again; only a store that
// answers says a permit is lost.)
func (p *Permit) Lost() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

// Release gives the permit back, once: a second Release, or one after the
// lease ended, changes nothing. Its error is the store's; the permit's
// lease then ends by itself. It is observed (OpRelease).
func (p *Permit) Release(ctx context.Context) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	if p.released {
		p.mu.Unlock()
		return nil
	}
	p.released = true
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	l, req := p.l, p.req
	if l.clock != nil {
		req.Now = l.clock().UnixMicro()
	}
	began := time.Now()
	sctx, budget := l.budget(ctx, began)
	out, err := l.store.Release(sctx, req, p.id)
	budget.end()
	if l.observer != nil {
		var d Decision
		if err == nil {
			decisionTo(&d, out, req.Rule.MaxCost())
		}
		l.observer.Observe(ctx, Event{Name: l.name, Policy: p.policy, Key: req.Key, Cost: 1, Op: OpRelease, Decision: d,
			Err: err, Latency: time.Since(began), DryRun: l.dryRun})
	}
	if err != nil {
		return storeError(err)
	}
	return nil
}
