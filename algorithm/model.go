package algorithm

import (
	"sort"

	"github.com/ratelimit-go/ratelimit"
)

// Model is the reference implementation of the rules in this package's
// documentation: slow and plain (unsorted lists, full scans, no buffers), so
// that it is easy to check by reading. Tests feed the same requests to a
// store and to a Model and require identical decisions.
//
// Requests must carry their time (Request.Now); a Model has no clock. It is
// not safe for concurrent use.
type Model struct {
	logs  map[string][]int64 // sliding: every kept entry, in no order
	fixed map[string]fixedState
}

type fixedState struct {
	start int64
	count int
}

// NewModel returns an empty model.
func NewModel() *Model {
	return &Model{logs: map[string][]int64{}, fixed: map[string]fixedState{}}
}

// Take decides req as a Store must.
func (m *Model) Take(req ratelimit.Request) ratelimit.Decision {
	if req.Now.IsZero() {
		panic("algorithm.Model: request without a time")
	}
	if req.Policy.Algorithm == ratelimit.FixedWindow {
		return m.takeFixed(req).Decision(req.Policy.Limit)
	}
	return m.takeSliding(req).Decision(req.Policy.Limit)
}

// Reset forgets req's key under req's algorithm.
func (m *Model) Reset(req ratelimit.Request) {
	delete(m.logs, req.StoreKey())
	delete(m.fixed, req.StoreKey())
}

func (m *Model) takeSliding(req ratelimit.Request) Outcome {
	key, now, window := req.StoreKey(), Micros(req.Now), WindowMicros(req.Policy)
	var in []int64 // the entries in the window
	for _, t := range m.logs[key] {
		if t > now-window {
			in = append(in, t)
		}
	}
	if req.Cost > 0 { // a Take prunes; a peek leaves everything as it was
		m.logs[key] = append([]int64(nil), in...)
	}
	sort.Slice(in, func(i, j int) bool { return in[i] < in[j] })

	count, n, limit := len(in), max(req.Cost, 1), req.Policy.Limit
	out := Outcome{Allowed: count+n <= limit, Count: count, ResetAt: now, At: now}
	switch {
	case !out.Allowed && count+n-limit > count:
		out.RetryAfter = window
	case !out.Allowed:
		out.RetryAfter = in[count+n-limit-1] + window - now
	case req.Cost > 0:
		for i := 0; i < req.Cost; i++ {
			m.logs[key] = append(m.logs[key], now)
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

func (m *Model) takeFixed(req ratelimit.Request) Outcome {
	key, now, window := req.StoreKey(), Micros(req.Now), WindowMicros(req.Policy)
	st, ok := m.fixed[key]
	start := now - ((now%window)+window)%window
	if !ok || start > st.start {
		st = fixedState{start: start}
	}
	n, limit := max(req.Cost, 1), req.Policy.Limit
	out := Outcome{Allowed: st.count+n <= limit, Count: st.count, ResetAt: st.start + window, At: now}
	if !out.Allowed {
		out.RetryAfter = out.ResetAt - now
	} else if req.Cost > 0 {
		st.count += req.Cost
		m.fixed[key] = st
		out.Count = st.count
	}
	return out
}
