package conformance

import (
	"sort"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/algorithm"
)

// Model is the reference implementation of the rules in package algorithm's
// documentation: slow and plain (unsorted lists, full scans, no buffers), so
// that it is easy to check by reading. Tests feed the same requests to a
// store and to a Model and require identical decisions.
//
// Requests must carry their time (ratelimit.CallerClock); a Model has no
// clock. It is not safe for concurrent use.
type Model struct {
	logs  map[state][]int64 // sliding: every kept entry, in no order
	fixed map[state]fixedState
}

// state names the state of one key under one algorithm.
type state struct {
	key ratelimit.Key
	alg ratelimit.Algorithm
}

type fixedState struct {
	start int64
	count int
}

// NewModel returns an empty model.
func NewModel() *Model {
	return &Model{logs: map[state][]int64{}, fixed: map[state]fixedState{}}
}

// Take decides req as a Store's Take must.
func (m *Model) Take(req ratelimit.Request) ratelimit.Decision { return m.decide(req, true) }

// Peek decides req as a Store's Peek must.
func (m *Model) Peek(req ratelimit.Request) ratelimit.Decision { return m.decide(req, false) }

func (m *Model) decide(req ratelimit.Request, record bool) ratelimit.Decision {
	if req.Clock != ratelimit.CallerClock {
		panic("conformance.Model: a request without the caller's time")
	}
	if req.Policy.Algorithm == ratelimit.FixedWindow {
		return m.takeFixed(req, record).Decision(req.Policy.Limit)
	}
	return m.takeSliding(req, record).Decision(req.Policy.Limit)
}

// Reset forgets key under every algorithm.
func (m *Model) Reset(key ratelimit.Key) {
	for _, alg := range ratelimit.Algorithms() {
		delete(m.logs, state{key, alg})
		delete(m.fixed, state{key, alg})
	}
}

func (m *Model) takeSliding(req ratelimit.Request, record bool) algorithm.Outcome {
	st, now, window := state{req.Key, req.Policy.Algorithm}, algorithm.Micros(req.Now), algorithm.WindowMicros(req.Policy)
	var in []int64 // the entries in the window
	for _, t := range m.logs[st] {
		if t > now-window {
			in = append(in, t)
		}
	}
	if record { // a Take prunes; a peek leaves everything as it was
		m.logs[st] = append([]int64(nil), in...)
	}
	sort.Slice(in, func(i, j int) bool { return in[i] < in[j] })

	count, n, limit := len(in), req.Cost, req.Policy.Limit
	out := algorithm.Outcome{Allowed: count+n <= limit, Count: count, ResetAt: now, At: now}
	switch {
	case !out.Allowed && count+n-limit > count:
		out.RetryAfter = window
	case !out.Allowed:
		out.RetryAfter = in[count+n-limit-1] + window - now
	case record:
		for i := 0; i < n; i++ {
			m.logs[st] = append(m.logs[st], now)
			in = append(in, now)
		}
		sort.Slice(in, func(i, j int) bool { return in[i] < in[j] })
		out.Count = len(in)
	}
	if len(in) > 0 {
		out.ResetAt = in[0] + window
	}
	return out
}

func (m *Model) takeFixed(req ratelimit.Request, record bool) algorithm.Outcome {
	key, now, window := state{req.Key, req.Policy.Algorithm}, algorithm.Micros(req.Now), algorithm.WindowMicros(req.Policy)
	st, ok := m.fixed[key]
	start := now - ((now%window)+window)%window
	if !ok || start > st.start {
		st = fixedState{start: start}
	}
	n, limit := req.Cost, req.Policy.Limit
	out := algorithm.Outcome{Allowed: st.count+n <= limit, Count: st.count, ResetAt: st.start + window, At: now}
	if !out.Allowed {
		out.RetryAfter = out.ResetAt - now
	} else if record {
		st.count += n
		m.fixed[key] = st
		out.Count = st.count
	}
	return out
}
