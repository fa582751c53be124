package algorithm

// Counter is the fixed-window state of one key: the start of its current
// window and the requests admitted in it. The zero value has no window yet.
type Counter struct {
	Start int64 // µs; meaningful when Started
	Count int
	// Started reports whether Start holds a window.
	Started bool
}

// Take decides a request of cost (0: a peek, which changes nothing) at now.
func (c *Counter) Take(now, window int64, limit, cost int) Outcome {
	start, count := c.Start, c.Count
	if ws := WindowStart(now, window); !c.Started || ws > start {
		start, count = ws, 0
	}
	n := effectiveCost(cost)
	out := Outcome{Allowed: count+n <= limit, Count: count, ResetAt: start + window, At: now}
	if !out.Allowed {
		out.RetryAfter = out.ResetAt - now
	} else if cost > 0 {
		count += cost
		out.Count = count
		*c = Counter{Start: start, Count: count, Started: true}
	}
	return out
}

// End is when the stored window ends under window, the time after which the
// counter holds nothing worth keeping.
func (c *Counter) End(window int64) int64 { return c.Start + window }
