package algorithm

// SlidingCounter is the sliding-window-counter state of one key: the start
// of its current fixed window, the count in it and the count of the window
// before. The zero value has no window yet. It is not safe for concurrent
// use; the store guards it.
type SlidingCounter struct {
	start, prev, cur int64
	started          bool
}

// Take decides a request of cost n at now, recording it if admitted.
func (c *SlidingCounter) Take(now int64, r Rate, n int64) (out Outcome, e Effect) {
	e = c.decide(now, &r, n, true, &out)
	return out, e
}

// TakeTo is Take, its outcome written to out: a store's hot path copies no
// Outcome.
func (c *SlidingCounter) TakeTo(now int64, r *Rate, n int64, out *Outcome) Effect {
	return c.decide(now, r, n, true, out)
}

// Peek decides as Take would and changes nothing.
func (c *SlidingCounter) Peek(now int64, r Rate, n int64) (out Outcome) {
	c.decide(now, &r, n, false, &out)
	return out
}

// current is the state rolled forward to now.
func (c *SlidingCounter) current(now, window int64) SlidingCounter {
	s := *c
	switch {
	case !s.started:
		s = SlidingCounter{start: WindowStart(now, window), started: true}
	case s.start > now: // from the future: moved to now's window
		s.start = WindowStart(now, window)
	case now < s.start+window:
	case now < s.start+2*window:
		s.start, s.prev, s.cur = s.start+window, s.cur, 0
	default:
		s = SlidingCounter{start: WindowStart(now, window), started: true}
	}
	return s
}

// keyTime is the time a request at now is decided at: the window's start,
// when now is behind it by at most MaxSkew.
func (c *SlidingCounter) keyTime(now int64) int64 {
	if !c.started || c.start <= now {
		return now
	}
	return keyTime(now, c.start)
}

// covered is the thousandths of the previous window that the sliding window
// ending e into the current one still covers, rounded up.
func covered(e, window int64) int64 { return ceilDiv((window-e)*1000, window) }

// weighted is the previous window's count p weighed by k thousandths,
// rounded up: the counter never admits more for rounding.
func weighted(p, k int64) int64 { return ceilDiv(p*k, 1000) }

// fitsAfter is the smallest e in [0, window] at which weighted(p,
// covered(e)) <= m. For m < 0 (a cost over the limit, which never fits) it
// is window: when p has slid out, the latest anything changes.
func fitsAfter(p, m, window int64) int64 {
	if p <= m {
		return 0
	}
	if m < 0 {
		return window
	}
	a := m * 1000 / p // the most thousandths that fit: p*a <= m*1000
	return window - a*window/1000
}

func (c *SlidingCounter) decide(now int64, r *Rate, n int64, record bool, out *Outcome) (eff Effect) {
	now = c.keyTime(now)
	s := c.current(now, r.Window)
	w, e := r.Window, now-s.start
	count, wp := s.cur, int64(0)
	if s.prev > 0 { // covered divides by the window: skipped when nothing is weighed
		wp = weighted(s.prev, covered(e, w))
		count += wp
	}
	out.set(count, 0, now)
	if n > r.Limit-count {
		if m := r.Limit - s.cur - n; m >= 0 { // fits in this window, once enough of the previous has slid out
			out.deny(s.start + fitsAfter(s.prev, m, w) - now)
		} else { // in the next window, where this one's count is the previous
			out.deny(s.start + w + fitsAfter(s.cur, r.Limit-n, w) - now)
		}
		if record && c.started && c.start > now {
			c.start = s.start // a Take rewrites state from the future, admitted or not
			eff.Changed = true
		}
	} else if record {
		s.cur += n
		*c = s
		out.Count = out.Count + n
		eff = Effect{Life: s.start + 2*w - now, Changed: true}
	}
	out.ResetAt = s.nextDrop(now, w, wp)
	return eff
}

// nextDrop is when the count of s next drops: when the weighted previous
// count (wp, at now) loses one, or, with none, when the current one starts
// sliding out.
func (s *SlidingCounter) nextDrop(now, w, wp int64) int64 {
	if wp > 0 {
		return s.start + fitsAfter(s.prev, wp-1, w)
	}
	if s.cur > 0 {
		return s.start + w + fitsAfter(s.cur, s.cur-1, w)
	}
	return now
}

// Refund gives back n of the count, from the current window first, then
// from the previous one (where a request weighs less); false, changing
// nothing, if they hold less.
func (c *SlidingCounter) Refund(now int64, r Rate, n int64) (Outcome, Effect, bool) {
	now = c.keyTime(now)
	s := c.current(now, r.Window)
	if n > s.cur+s.prev {
		return Outcome{}, Effect{}, false
	}
	fromCur := min(n, s.cur)
	s.cur, s.prev = s.cur-fromCur, s.prev-(n-fromCur)
	*c = s
	return c.Peek(now, r, 1), Effect{Life: c.Life(now, r), Changed: true}, true
}

// Empty reports whether the state holds no window.
func (c *SlidingCounter) Empty() bool { return !c.started }

// Life is how long after now the state still matters: until the window
// after the current one ends, through which its count still weighs.
func (c *SlidingCounter) Life(now int64, r Rate) int64 { return c.start + 2*r.Window - now }
