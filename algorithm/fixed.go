package algorithm

// Counter is the fixed-window state of one key: the start of its current
// window and the requests admitted in it. The zero value has no window yet.
// It is not safe for concurrent use; the store guards it.
type Counter struct {
	start   int64 // µs; meaningful when started
	count   int
	started bool
}

// Take decides a request of cost n at now, recording it if admitted.
func (c *Counter) Take(now, window int64, limit, n int) Outcome {
	return c.decide(now, window, limit, n, true)
}

// Peek decides as Take would and changes nothing.
func (c *Counter) Peek(now, window int64, limit, n int) Outcome {
	return c.decide(now, window, limit, n, false)
}

func (c *Counter) decide(now, window int64, limit, n int, record bool) Outcome {
	start, count := c.start, c.count
	if ws := WindowStart(now, window); !c.started || ws > start {
		start, count = ws, 0
	}
	out := Outcome{Allowed: count+n <= limit, Count: count, ResetAt: start + window, At: now}
	if !out.Allowed {
		out.RetryAfter = out.ResetAt - now
	} else if record {
		count += n
		out.Count = count
		*c = Counter{start: start, count: count, started: true}
	}
	return out
}

// Empty reports whether the counter holds no window.
func (c *Counter) Empty() bool { return !c.started }

// End is when the stored window ends under window, the time after which the
// counter holds nothing worth keeping.
func (c *Counter) End(window int64) int64 { return c.start + window }
