package algorithm

// Charge and Undo: usage known only afterwards, and an admission given
// back (the rules are in the package documentation).

// MaxCharge bounds the cost of a charge: 2^40, ratelimit's MaxLimit.
const MaxCharge = 1 << 40

// MaxDebt is the longest, µs, that what a charge put past a bucket's burst
// takes to drain: 100 days, ratelimit's MaxWindow.
const MaxDebt = 100 * 24 * 3600 * 1_000_000

// charged is what a charge of n leaves of o, the peek of cost 1 after it:
// RetryAfter 0 when the charge fit.
func charged(o Outcome, fit bool) Outcome {
	if fit {
		o.RetryAfter = 0
	}
	return o
}

// Charge records a usage of n (at most MaxCharge) at now, past the limit if
// need be: see the rules above.
func (f *Fixed) Charge(now int64, r Rate, n int64) (Outcome, Effect) {
	now = f.keyTime(now)
	start, count := f.current(now, r.Window)
	count = min(count+min(n, MaxCharge), r.Limit+MaxCharge)
	f.set(start, count, f.alignedTo(start, r.Window))
	return charged(f.Peek(now, r, 1), count <= r.Limit), Effect{Life: f.Life(now, r), Changed: true}
}

// Undo gives back up to n of the admission recorded at at, while its
// window counts: see the rules above.
func (f *Fixed) Undo(now, at int64, r Rate, n int64) (Outcome, Effect) {
	now = f.keyTime(now)
	start, count := f.current(now, r.Window)
	if at < start || count == 0 {
		return f.Peek(now, r, 1), Effect{}
	}
	f.set(start, count-min(n, count), f.alignedTo(start, r.Window))
	return f.Peek(now, r, 1), Effect{Life: f.Life(now, r), Changed: true}
}

// Charge records a usage of n (at most MaxCharge) at now, past the limit if
// need be, in the current window: see the rules above.
func (c *SlidingCounter) Charge(now int64, r Rate, n int64) (Outcome, Effect) {
	now = c.keyTime(now)
	s := c.current(now, r.Window)
	s.cur = min(s.cur+min(n, MaxCharge), r.Limit+MaxCharge)
	*c = s
	out := c.Peek(now, r, 1)
	return charged(out, out.Count <= r.Limit), Effect{Life: c.Life(now, r), Changed: true}
}

// Undo gives back up to n of the admission recorded at at, from the window
// it was counted in while that window still weighs: see the rules above.
func (c *SlidingCounter) Undo(now, at int64, r Rate, n int64) (Outcome, Effect) {
	now = c.keyTime(now)
	s := c.current(now, r.Window)
	switch {
	case at >= s.start && s.cur > 0:
		s.cur -= min(n, s.cur)
	case at < s.start && at >= s.start-r.Window && s.prev > 0:
		s.prev -= min(n, s.prev)
	default:
		return c.Peek(now, r, 1), Effect{}
	}
	*c = s
	return c.Peek(now, r, 1), Effect{Life: c.Life(now, r), Changed: true}
}

// Charge records a usage of n (at most MaxCharge) at now, past the burst if
// need be, up to what drains in MaxDebt: see the rules above.
func (b *Bucket) Charge(now int64, r Rate, n int64) (Outcome, Effect) {
	now = b.keyTime(now)
	level, capacity := b.levelAt(now, &r), r.Burst*r.Unit
	top := capacity + min(MaxDebt, (MaxStored-capacity)/r.Drain)*r.Drain // at most MaxStored
	if n = min(n, MaxCharge); n > (top-level)/r.Unit {
		level = max(top, level)
	} else {
		level += n * r.Unit
	}
	b.set(now, level, &r)
	return charged(b.Peek(now, r, 1), level <= capacity), Effect{Life: b.Life(now, r), Changed: true}
}

// Undo lowers the level by up to n requests' worth (to empty at most): a
// bucket does not tell one admission from another. See the rules above.
func (b *Bucket) Undo(now, at int64, r Rate, n int64) (Outcome, Effect) {
	now = b.keyTime(now)
	level := b.levelAt(now, &r)
	if level == 0 {
		return b.Peek(now, r, 1), Effect{}
	}
	if n >= ceilDiv(level, r.Unit) {
		level = 0
	} else {
		level -= n * r.Unit
	}
	b.set(now, level, &r)
	return b.Peek(now, r, 1), Effect{Life: b.Life(now, r), Changed: true}
}

// Charge records a usage of n (at most MaxCharge) at now as one entry, past
// the limit if need be, and keeps the newest Limit+1 units: see the rules.
func (l *Log) Charge(now int64, r Rate, n int64) (Outcome, Effect) {
	now = l.keyTime(now)
	l.retime(now)
	l.prune(now - r.Window)
	fit := n <= r.Limit-l.total
	keep := r.Limit + 1         // a count past the limit says so
	l.insert(now, min(n, keep)) // more would be dropped at once
	for excess := l.total - keep; excess > 0; {
		// The oldest entry; the newest, n's, holds at most keep.
		x, next := entryAt(l.buf, l.head)
		if x.Cost > excess {
			l.total -= excess
			if x.Cost-excess == 1 { // one word: the time moves onto the cost's
				l.buf[next-1], l.head = x.At, next-1
			} else {
				l.buf[next-1] = -(x.Cost - excess)
			}
			break
		}
		excess -= x.Cost
		l.total -= x.Cost
		l.head, l.n = next, l.n-1
	}
	return charged(l.Peek(now, r, 1), fit), Effect{Life: l.Life(now, r), Changed: true}
}

// Undo drops up to n units of the admission recorded at at (the entries of
// that time, the newest first): see the rules above.
func (l *Log) Undo(now, at int64, r Rate, n int64) (Outcome, Effect) {
	now = l.keyTime(now)
	changed := l.retime(now)
	changed = l.prune(now-r.Window) || changed
	e := l.buf[l.head:]
	i := firstAfter(e, at) // the words after the entries at at
	// The entries at at that give n back, newest first: e[j:i].
	j, give, had := i, int64(0), 0
	for j > 0 && give < n {
		k := j - 1
		if e[k] < 0 {
			k--
		}
		if e[k] != at {
			break
		}
		x, _ := entryAt(e, k)
		give, j, had = give+x.Cost, k, had+1
	}
	if j < i {
		// What they keep stays in the oldest of them, in order: the
		// newest give theirs first. Written over them (no more words
		// than they held), then the entries after them.
		keep := max(give-n, 0)
		l.total -= give - keep
		w, kept := j, 0
		for k := j; k < i && keep > 0; {
			x, next := entryAt(e, k)
			c := min(x.Cost, keep)
			keep, kept = keep-c, kept+1
			e[w] = at
			if w++; c != 1 {
				e[w] = -c
				w++
			}
			k = next
		}
		tail := copy(e[w:], e[i:])
		l.buf = l.buf[:l.head+w+tail]
		l.n -= had - kept
		changed = true
	}
	if l.head == len(l.buf) {
		l.buf, l.head = l.buf[:0], 0
	}
	if !changed {
		return l.Peek(now, r, 1), Effect{}
	}
	return l.Peek(now, r, 1), Effect{Life: l.Life(now, r), Changed: true}
}
