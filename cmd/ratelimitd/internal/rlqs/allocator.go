package rlqs

import (
	"math"
	"slices"
	"time"
)

// Allocator splits one rule's limit (requests per window) between the data
// planes reporting on one of its buckets, and keeps the limit while it
// moves shares between them.
//
// A plane enforces the last assignment it received until that one's time
// to live ends, and the server cannot know which of the assignments it
// sent a plane has received yet. So a plane is counted at the largest
// grant sent it within a hold (its TTL and half again: the plane counts
// the TTL from when the answer reaches it), and a grant is raised only
// into what the others' holds leave: at every moment the holds, and so
// what the planes may be enforcing, sum to the limit at most. A grant
// lowered ends its old hold when the plane has surely received the new
// one (its second report after it was sent: one report may cross the
// answer, not two, while the planes report an interval apart and the
// network's round trip is shorter than one), or within a hold's time; a
// raise waits for that. After demand moves, grants reach their fair values
// (FairShares) within two reports of the planes (one, and the immediate
// one an Envoy sends when an answer changes its assignment), if they keep
// reporting.
//
// A plane counts in the shares while it reported within two TTLs (a TTL
// is about an interval and a half of its reports: one late report does
// not drop it) or until its stream ends (Forget); then its hold ends with
// its last grant's, and its share goes to the others. The planes must
// deny what no live assignment covers (Envoy's no_assignment_behavior and
// expired_assignment_behavior: not allow_all, not reuse_last_assignment),
// or the bound holds only while the server answers.
//
// An Allocator is not safe for concurrent use: its caller serializes
// Report and Assign (one rule's bucket is one lock's).
type Allocator struct {
	limit  int64
	ttl    time.Duration
	planes map[string]*plane
}

// plane is what the allocator knows of one data plane.
type plane struct {
	demand  int64     // requests a window, as last reported
	seen    time.Time // when it last reported
	reports int64     // its reports so far
	sent    []grant   // the grants sent it whose hold may not have ended, oldest first
}

// grant is an assignment sent: n requests a window, enforced until at
// most, sent after the plane's at-th report.
type grant struct {
	n     int64
	until time.Time
	at    int64
}

// NewAllocator returns an allocator of limit requests a window, whose
// assignments live ttl. limit must be at least 0 and ttl positive.
func NewAllocator(limit int64, ttl time.Duration) *Allocator {
	return &Allocator{limit: max(limit, 0), ttl: max(ttl, time.Nanosecond), planes: map[string]*plane{}}
}

// Report records that plane id asked for demand requests a window (its
// allowed and denied requests, scaled to the window) at now; a demand
// below 0 is not known, and the last one stands (0 for a new plane).
func (a *Allocator) Report(id string, demand int64, now time.Time) {
	p := a.planes[id]
	if p == nil {
		p = &plane{}
		a.planes[id] = p
	}
	if demand >= 0 {
		p.demand = demand
	}
	p.seen = now
	p.reports++
	// A grant sent two reports ago or more has reached the plane (one
	// report may cross an answer on its way, not two: a plane reports an
	// interval apart, or at once when an answer changed its assignment), so
	// every older one is replaced there: their holds end now.
	for j := len(p.sent) - 1; j > 0; j-- {
		if p.reports >= p.sent[j].at+2 {
			p.sent = p.sent[j:]
			break
		}
	}
}

// Forget records that plane id will not report again (its stream ended):
// it gets no more grants, and its hold ends with its last grant's.
func (a *Allocator) Forget(id string) {
	if p := a.planes[id]; p != nil {
		p.seen = time.Time{}
	}
}

// Assign returns the grant to send each plane of only (all planes
// reporting within two TTLs when only is empty), in requests a window,
// and records them as sent at now (each held a TTL and half again). A plane of
// only that has not reported within two TTLs gets none. Planes silent for
// two TTLs are forgotten once their holds end.
func (a *Allocator) Assign(now time.Time, only ...string) map[string]int64 {
	ids := a.prune(now)
	slices.Sort(ids) // the order rounding's units follow: the same every call
	demands := make([]int64, len(ids))
	for i, id := range ids {
		demands[i] = a.planes[id].demand
	}
	fair := FairShares(a.limit, demands)

	// Lowered grants first: their old holds stay until their TTLs end,
	// and what is left after every hold goes to the raises.
	held := int64(0)
	for _, p := range a.planes {
		held += p.hold()
	}
	out := make(map[string]int64, len(ids))
	var raises []int
	for i, id := range ids {
		if len(only) > 0 && !slices.Contains(only, id) {
			continue
		}
		if h := a.planes[id].hold(); fair[i] <= h {
			out[id] = fair[i]
		} else {
			raises = append(raises, i)
		}
	}
	room := a.limit - held
	for _, i := range raises {
		p := a.planes[ids[i]]
		h := p.hold()
		g := min(fair[i], h+max(room, 0))
		out[ids[i]] = g
		room -= g - h
	}
	// A grant counts for its TTL and half again: a plane counts the TTL
	// from when the answer reaches it, so one late by less than half a
	// TTL is still counted while it enforces it.
	until := now.Add(a.ttl + a.ttl/2)
	for id, g := range out {
		p := a.planes[id]
		p.sent = append(p.sent, grant{n: g, until: until, at: p.reports})
	}
	return out
}

// prune drops the grants whose hold ended at now, and the planes silent
// for two TTLs that hold none, and returns the live planes' ids.
func (a *Allocator) prune(now time.Time) (live []string) {
	for id, p := range a.planes {
		p.sent = slices.DeleteFunc(p.sent, func(g grant) bool { return !g.until.After(now) })
		switch {
		case now.Sub(p.seen) < 2*a.ttl:
			live = append(live, id)
		case len(p.sent) == 0:
			delete(a.planes, id)
		}
	}
	return live
}

// Idle reports whether no plane is known at now (after prune): the
// allocator can go.
func (a *Allocator) Idle(now time.Time) bool {
	a.prune(now)
	return len(a.planes) == 0
}

// SetLimit changes the limit (a rule's, reloaded). The holds stay: a lower
// limit is reached as they end, a hold's time at most, and grants are raised only
// into what they leave under the new one.
func (a *Allocator) SetLimit(limit int64) { a.limit = max(limit, 0) }

// Rescale changes the window grants are counted in (a rule reloaded with
// another): every grant and demand is multiplied by scale (the new window
// over the old), rounded up, so the holds keep their rates; then the limit
// is limit, as SetLimit.
func (a *Allocator) Rescale(limit int64, scale float64) {
	up := func(n int64) int64 { return int64(math.Ceil(float64(n) * scale)) }
	for _, p := range a.planes {
		p.demand = up(p.demand)
		for i := range p.sent {
			p.sent[i].n = up(p.sent[i].n)
		}
	}
	a.SetLimit(limit)
}

// Held is what the planes may be enforcing at now: the sum of their
// holds, never more than the limit (but after SetLimit lowered it, until
// the older holds end).
func (a *Allocator) Held(now time.Time) int64 {
	sum := int64(0)
	for _, p := range a.planes {
		sum += p.holdAt(now)
	}
	return sum
}

// hold is the largest grant sent p not yet pruned (Assign prunes at its
// now first).
func (p *plane) hold() int64 {
	h := int64(0)
	for _, g := range p.sent {
		h = max(h, g.n)
	}
	return h
}

// holdAt is the largest grant sent p whose hold has not ended at now.
func (p *plane) holdAt(now time.Time) int64 {
	h := int64(0)
	for _, g := range p.sent {
		if g.until.After(now) {
			h = max(h, g.n)
		}
	}
	return h
}
