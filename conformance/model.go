package conformance

import (
	"math/big"
	"sort"

	"github.com/ratelimit-go/ratelimit/backend"
)

// Model is the reference implementation of the rules in package algorithm's
// documentation: slow and plain (unsorted lists, full scans, searches instead
// of formulas, exact fractions), so that it is easy to check by reading.
// Tests feed the same requests to a store and to a Model and require
// identical outcomes (all but Life, which the model does not compute).
//
// Requests must carry their time (backend.Request.Now); a Model has no
// clock. It reads a request's rule by its limit, window and burst only,
// and computes with its own arithmetic. It is not safe for concurrent use.
type Model struct {
	logs    map[state][]entry
	fixed   map[state]windowState
	counter map[state]windowState
	gcra    map[state]bucketState
	permits map[state][]lease
	boxes   map[state]int64 // penalty boxes: until when
}

// state names the state of one key under one algorithm.
type state struct {
	prefix, key string
	alg         backend.Algorithm
}

type entry struct{ at, cost int64 }

// windowState is a fixed window's (start, count), and for the counter the
// previous window's count.
type windowState struct{ start, count, prev int64 }

// bucketState is GCRA's: at time at, the bucket held level (µs of spacing
// still owed, exact) and level/interval requests' worth.
type bucketState struct {
	at       int64
	level    *big.Rat // µs
	interval *big.Rat // the policy's Window/Limit when written, µs
}

// NewModel returns an empty model.
func NewModel() *Model {
	return &Model{logs: map[state][]entry{}, fixed: map[state]windowState{}, counter: map[state]windowState{}, gcra: map[state]bucketState{},
		permits: map[state][]lease{}, boxes: map[state]int64{}}
}

// Take decides req as a Store's Take must.
func (m *Model) Take(req backend.Request) backend.Outcome {
	return m.boxed(req, false, func() (backend.Outcome, bool) { out := m.decide(req, true); return out, out.Allowed() })
}

// Peek decides req as a Store's Peek must.
func (m *Model) Peek(req backend.Request) backend.Outcome {
	if until := m.boxes[stateOf(req)]; req.Rule.Block() > 0 && until > req.Now {
		return boxedOutcome(req, until)
	}
	return m.decide(req, false)
}

func stateOf(req backend.Request) state {
	return state{req.Rule.Prefix(), req.Key, req.Rule.Algorithm()}
}

// Refund refunds req.Cost as a store's Refund must, reporting false when it
// must be refused; with req.Admitted, it undoes that admission (Undo).
func (m *Model) Refund(req backend.Request) (backend.Outcome, bool) {
	if req.Admitted != 0 {
		return m.undo(req), true
	}
	if req.Cost > req.Rule.MaxCost() { // refused, whatever the key holds (a charge may have left more)
		return backend.Outcome{}, false
	}
	st, n := stateOf(req), req.Cost
	now := m.keyTime(st, req.Now)
	w := req.Rule.Window()
	switch req.Rule.Algorithm() {
	case backend.SlidingWindow:
		in := m.slidingIn(st, now, w)
		if n > sum(in) {
			return backend.Outcome{}, false
		}
		m.logs[st] = in
		for n > 0 { // the newest first
			sort.Slice(in, func(i, j int) bool { return in[i].at < in[j].at })
			last := &in[len(in)-1]
			took := min(last.cost, n)
			last.cost, n = last.cost-took, n-took
			if last.cost == 0 {
				in = in[:len(in)-1]
			}
		}
		m.logs[st] = in
	case backend.FixedWindow:
		ws := fixedNow(m.fixed[st], now, w, m.hasFixed(st))
		if n > ws.count {
			return backend.Outcome{}, false
		}
		ws.count -= n
		m.fixed[st] = ws
	case backend.SlidingWindowCounter:
		ws := counterNow(m.counter[st], now, w, m.hasCounter(st))
		if n > ws.count+ws.prev {
			return backend.Outcome{}, false
		}
		fromCur := min(n, ws.count)
		ws.count, ws.prev = ws.count-fromCur, ws.prev-(n-fromCur)
		m.counter[st] = ws
	case backend.GCRA:
		b := m.bucketNow(st, now, req.Rule)
		if n > ceilRat(new(big.Rat).Quo(b.level, b.interval)) {
			return backend.Outcome{}, false
		}
		b.level.Sub(b.level, new(big.Rat).Mul(big.NewRat(n, 1), b.interval))
		if b.level.Sign() < 0 {
			b.level.SetInt64(0)
		}
		b.at = now
		m.gcra[st] = b
	}
	peek := req
	peek.Cost, peek.Now = 1, now
	return m.Peek(peek), true
}

func (m *Model) decide(req backend.Request, record bool) backend.Outcome {
	if req.Now == 0 {
		panic("conformance.Model: a request without the caller's time")
	}
	if req.Rule.Algorithm() == backend.InFlight { // a peek at the permits held
		return m.permitsAt(req, 0, false)
	}
	st := stateOf(req)
	now := m.keyTime(st, req.Now)
	var out outcome
	switch req.Rule.Algorithm() {
	case backend.FixedWindow:
		out = m.decideFixed(st, now, req, record)
	case backend.SlidingWindowCounter:
		out = m.decideCounter(st, now, req, record)
	case backend.GCRA:
		out = m.decideGCRA(st, now, req, record)
	default:
		out = m.decideSliding(st, now, req, record)
	}
	return out.answer()
}

// keyTime is the time a request at now is decided at on st: the key's own
// time (the newest entry's, the window's start, a non-empty bucket's),
// when now is behind it by at most backend.MaxSkew; else now.
func (m *Model) keyTime(st state, now int64) int64 {
	at, ok := int64(0), false
	switch st.alg {
	case backend.SlidingWindow:
		for _, e := range m.logs[st] {
			at, ok = max(at, e.at), true
		}
	case backend.FixedWindow:
		at, ok = m.fixed[st].start, m.hasFixed(st)
	case backend.SlidingWindowCounter:
		at, ok = m.counter[st].start, m.hasCounter(st)
	case backend.GCRA:
		b, has := m.gcra[st]
		at, ok = b.at, has && b.level.Sign() > 0
	}
	if ok && at > now && at-now <= backend.MaxSkew.Microseconds() {
		return at
	}
	return now
}

// Reset forgets key under prefix and every algorithm.
func (m *Model) Reset(prefix, key string) {
	for _, alg := range backend.Algorithms() {
		st := state{prefix, key, alg}
		delete(m.logs, st)
		delete(m.fixed, st)
		delete(m.counter, st)
		delete(m.gcra, st)
		delete(m.boxes, st)
		delete(m.permits, state{prefix, key, backend.InFlight})
	}
}

func sum(es []entry) int64 {
	n := int64(0)
	for _, e := range es {
		n += e.cost
	}
	return n
}

// slidingIn is the log's entries in the window at now, those later than now
// moved to now.
func (m *Model) slidingIn(st state, now, window int64) []entry {
	var in []entry
	for _, e := range m.logs[st] {
		if e.at > now {
			e.at = now
		}
		if e.at > now-window {
			in = append(in, e)
		}
	}
	return in
}

func (m *Model) decideSliding(st state, now int64, req backend.Request, record bool) outcome {
	window := req.Rule.Window()
	in := m.slidingIn(st, now, window)
	if record { // a Take re-times and prunes; a peek leaves everything as it was
		m.logs[st] = append([]entry(nil), in...)
	}
	sort.Slice(in, func(i, j int) bool { return in[i].at < in[j].at })
	count, n, limit := sum(in), req.Cost, req.Rule.Limit()
	out := outcome{Allowed: count+n <= limit, Count: count, ResetAt: now, At: now}
	switch {
	case !out.Allowed:
		out.RetryAfter = window
		// Walk the units from the oldest: the request fits once the k-th has left.
		k := count + n - limit
		for _, e := range in {
			if k -= e.cost; k <= 0 {
				out.RetryAfter = e.at + window - now
				break
			}
		}
	case record:
		m.logs[st] = append(m.logs[st], entry{now, n})
		in = append(in, entry{now, n})
		out.Count += n
	}
	if len(in) > 0 {
		out.ResetAt = in[0].at + window
	}
	return out
}

func (m *Model) hasFixed(st state) bool   { _, ok := m.fixed[st]; return ok }
func (m *Model) hasCounter(st state) bool { _, ok := m.counter[st]; return ok }

// outcome is an outcome as the model computes it: its own type, as its
// arithmetic is its own.
type outcome struct {
	Allowed                        bool
	Count, ResetAt, RetryAfter, At int64 // RetryAfter µs; the others µs since the Unix epoch
}

// answer is o as a store answers it (with no Life: the model does not say
// how long state is kept), where a denial is a RetryAfter of at least 1µs.
func (o outcome) answer() backend.Outcome {
	retry := o.RetryAfter
	if !o.Allowed {
		retry = max(retry, 1)
	}
	return backend.Outcome{Count: o.Count, ResetAt: o.ResetAt, RetryAfter: retry, At: o.At}
}

// alignedStart is the start of the fixed window holding now.
func alignedStart(now, window int64) int64 {
	return now - ((now%window)+window)%window
}

// fixedNow is the fixed window that now counts in.
func fixedNow(ws windowState, now, window int64, ok bool) windowState {
	start := alignedStart(now, window)
	switch {
	case !ok || start > ws.start:
		return windowState{start: start}
	case ws.start > now:
		return windowState{start: start, count: ws.count}
	}
	return ws
}

func (m *Model) decideFixed(st state, now int64, req backend.Request, record bool) outcome {
	window := req.Rule.Window()
	old, ok := m.fixed[st]
	ws := fixedNow(old, now, window, ok)
	n, limit := req.Cost, req.Rule.Limit()
	// The window ends where the next aligned one starts and replaces it.
	out := outcome{Allowed: ws.count+n <= limit, Count: ws.count, ResetAt: alignedStart(ws.start, window) + window, At: now}
	switch {
	case !out.Allowed:
		out.RetryAfter = out.ResetAt - now
		if record && ok && old.start > now {
			m.fixed[st] = ws
		}
	case record:
		ws.count += n
		m.fixed[st] = ws
		out.Count = ws.count
	}
	return out
}

// counterNow is the counter's state rolled forward to now.
func counterNow(ws windowState, now, window int64, ok bool) windowState {
	switch {
	case !ok:
		return windowState{start: alignedStart(now, window)}
	case ws.start > now:
		ws.start = alignedStart(now, window)
	case now < ws.start+window:
	case now < ws.start+2*window:
		ws = windowState{start: ws.start + window, prev: ws.count}
	default:
		ws = windowState{start: alignedStart(now, window)}
	}
	return ws
}

// counterCount is the counter's count at now (ws already rolled to now's
// window): the previous count weighed by the thousandths still covered,
// both rounded up.
func counterCount(ws windowState, now, window int64) int64 {
	thousandths := ceilRat(big.NewRat((window-(now-ws.start))*1000, window))
	return ceilRat(big.NewRat(ws.prev*thousandths, 1000)) + ws.count
}

// counterFits is the first time from now (within two windows) when
// fits(count at that time) holds, with nothing else admitted: found by
// binary search, as the count only falls while time passes.
func counterFits(ws windowState, now, window int64, fits func(int64) bool) (int64, bool) {
	at := func(t int64) int64 { return counterCount(counterNow(ws, t, window, true), t, window) }
	lo, hi := now, ws.start+2*window
	if !fits(at(hi)) {
		return 0, false
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if fits(at(mid)) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, true
}

func (m *Model) decideCounter(st state, now int64, req backend.Request, record bool) outcome {
	window := req.Rule.Window()
	old, ok := m.counter[st]
	ws := counterNow(old, now, window, ok)
	n, limit := req.Cost, req.Rule.Limit()
	count := counterCount(ws, now, window)
	out := outcome{Allowed: count+n <= limit, Count: count, At: now}
	switch {
	case !out.Allowed:
		t, _ := counterFits(ws, now, window, func(c int64) bool { return c+n <= limit })
		out.RetryAfter = t - now
		if record && ok && old.start > now {
			m.counter[st] = ws
		}
	case record:
		ws.count += n
		m.counter[st] = ws
		out.Count += n
	}
	out.ResetAt = now
	if out.Count > 0 {
		c := out.Count
		out.ResetAt, _ = counterFits(ws, now, window, func(x int64) bool { return x < c })
	}
	return out
}
