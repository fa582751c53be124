package conformance

import (
	"math/big"
	"sort"

	"github.com/ratelimit-go/ratelimit/algorithm"
	"github.com/ratelimit-go/ratelimit/backend"
)

// Charge records req.Cost of usage as a store's Charge must: whatever the
// quota left, past the limit if need be (within the debt's bounds), and
// answers what a peek of cost 1 says afterwards, Allowed when it fit.
func (m *Model) Charge(req backend.Request) backend.Outcome {
	return m.boxed(req, true, func() (backend.Outcome, bool) { return m.charge(req) })
}

// charge is Charge but for the penalty box, and whether the charge fit.
func (m *Model) charge(req backend.Request) (backend.Outcome, bool) {
	st, n := stateOf(req), req.Cost
	now := m.keyTime(st, req.Now)
	w, limit := req.Rule.Window(), req.Rule.Limit()
	fit := false
	switch req.Rule.Algorithm() {
	case backend.SlidingWindow:
		in := m.slidingIn(st, now, w)
		sort.Slice(in, func(i, j int) bool { return in[i].at < in[j].at })
		fit = sum(in)+n <= limit
		in = append(in, entry{now, n})
		for excess := sum(in) - limit - 1; excess > 0; { // a log keeps the newest Limit+1 units
			took := min(in[0].cost, excess)
			in[0].cost, excess = in[0].cost-took, excess-took
			if in[0].cost == 0 {
				in = in[1:]
			}
		}
		m.logs[st] = in
	case backend.FixedWindow:
		ws := fixedNow(m.fixed[st], now, w, m.hasFixed(st))
		ws.count = min(ws.count+n, limit+backend.MaxCharge)
		fit = ws.count <= limit
		m.fixed[st] = ws
	case backend.SlidingWindowCounter:
		ws := counterNow(m.counter[st], now, w, m.hasCounter(st))
		ws.count = min(ws.count+n, limit+backend.MaxCharge)
		fit = counterCount(ws, now, w) <= limit
		m.counter[st] = ws
	case backend.GCRA:
		b := m.bucketNow(st, now, req.Rule)
		capacity := new(big.Rat).Mul(big.NewRat(req.Rule.Burst(), 1), b.interval)
		b.level.Add(b.level, new(big.Rat).Mul(big.NewRat(n, 1), b.interval))
		if top := debtTop(req.Rule, capacity); b.level.Cmp(top) > 0 {
			b.level = top
		}
		fit = b.level.Cmp(capacity) <= 0
		m.gcra[st] = b
	}
	peek := req
	peek.Cost, peek.Now = 1, now
	out := m.decide(peek, false)
	if fit {
		out.RetryAfter = 0
	}
	return out, fit
}

// debtTop is the highest level (µs of spacing owed) a charge leaves a
// bucket at: what drains in algorithm.MaxDebt past a full one, and no more
// than algorithm.MaxStored of the stores' units: whole drains of d units,
// 1/d µs each, for d = limit/gcd(window, limit).
func debtTop(r *backend.Rule, capacity *big.Rat) *big.Rat {
	g := new(big.Int).GCD(nil, nil, big.NewInt(r.Window()), big.NewInt(r.Limit())).Int64()
	unit, d := r.Window()/g, r.Limit()/g
	stored := new(big.Rat).Add(capacity, big.NewRat((algorithm.MaxStored-r.Burst()*unit)/d, 1))
	if top := new(big.Rat).Add(capacity, big.NewRat(algorithm.MaxDebt, 1)); top.Cmp(stored) < 0 {
		return top
	}
	return stored
}

// undo gives back up to req.Cost of the admission recorded at req.Admitted,
// as a store's Refund of it must, and answers what a peek of cost 1 says
// afterwards.
func (m *Model) undo(req backend.Request) backend.Outcome {
	st, n, at := stateOf(req), req.Cost, req.Admitted
	now := m.keyTime(st, req.Now)
	w := req.Rule.Window()
	switch req.Rule.Algorithm() {
	case backend.SlidingWindow:
		in := m.slidingIn(st, now, w)
		for i := len(in) - 1; i >= 0 && n > 0; i-- { // that admission's units, wherever they sit
			if in[i].at == at {
				took := min(in[i].cost, n)
				in[i].cost, n = in[i].cost-took, n-took
			}
		}
		var kept []entry
		for _, e := range in {
			if e.cost > 0 {
				kept = append(kept, e)
			}
		}
		m.logs[st] = kept
	case backend.FixedWindow:
		if ws := fixedNow(m.fixed[st], now, w, m.hasFixed(st)); at >= ws.start && ws.count > 0 {
			ws.count -= min(n, ws.count)
			m.fixed[st] = ws
		}
	case backend.SlidingWindowCounter:
		ws := counterNow(m.counter[st], now, w, m.hasCounter(st))
		switch {
		case at >= ws.start && ws.count > 0: // counted in the current window
			ws.count -= min(n, ws.count)
			m.counter[st] = ws
		case at < ws.start && at >= ws.start-w && ws.prev > 0: // in the previous one
			ws.prev -= min(n, ws.prev)
			m.counter[st] = ws
		}
	case backend.GCRA:
		if b := m.bucketNow(st, now, req.Rule); b.level.Sign() > 0 {
			b.level.Sub(b.level, new(big.Rat).Mul(big.NewRat(n, 1), b.interval))
			if b.level.Sign() < 0 {
				b.level.SetInt64(0)
			}
			m.gcra[st] = b
		}
	}
	peek := req
	peek.Cost, peek.Now, peek.Admitted = 1, now, 0
	return m.Peek(peek)
}
