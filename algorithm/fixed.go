package algorithm

// Fixed is the fixed-window state of one key: the start of its current
// window and the requests admitted in it. The zero value has no window yet.
// It is not safe for concurrent use; the store guards it.
type Fixed struct {
	start   int64 // µs; meaningful when started
	count   int64
	aligned int64 // a window length start is aligned to (0: none known)
	started bool
}

// Take decides a request of cost n at now, recording it if admitted.
func (f *Fixed) Take(now int64, r Rate, n int64) (out Outcome, e Effect) {
	e = f.decide(now, &r, n, true, &out)
	return out, e
}

// TakeTo is Take, its outcome written to out: a store's hot path copies no
// Outcome.
func (f *Fixed) TakeTo(now int64, r *Rate, n int64, out *Outcome) Effect {
	return f.decide(now, r, n, true, out)
}

// Peek decides as Take would and changes nothing.
func (f *Fixed) Peek(now int64, r Rate, n int64) (out Outcome) {
	f.decide(now, &r, n, false, &out)
	return out
}

// current is the window that now counts in, and its count.
func (f *Fixed) current(now, window int64) (start, count int64) {
	if f.started && f.aligned == window && f.start <= now && now < f.start+window {
		return f.start, f.count // the common case, without a division
	}
	ws := WindowStart(now, window)
	switch {
	case !f.started || ws > f.start:
		return ws, 0
	case f.start > now: // from the future: moved to now's window
		return ws, f.count
	}
	return f.start, f.count
}

func (f *Fixed) decide(now int64, r *Rate, n int64, record bool, out *Outcome) (e Effect) {
	now = f.keyTime(now)
	start, count := f.current(now, r.Window)
	end := start + r.Window
	if f.aligned != r.Window || start != f.start {
		end = fixedEnd(start, r.Window)
	}
	out.set(count, end, now)
	switch {
	case n > r.Limit-count:
		out.deny(end - now)
		if record && f.started && f.start > now {
			f.start, f.aligned = start, r.Window // a Take rewrites state from the future, admitted or not
			e.Changed = true
		}
	case record:
		f.set(start, count+n, f.alignedTo(start, r.Window))
		out.Count = f.count
		e = Effect{Life: out.ResetAt - now, Changed: true}
	}
	return e
}

// Refund gives back n of the current window's count; false, changing
// nothing, if it holds less.
func (f *Fixed) Refund(now int64, r Rate, n int64) (Outcome, Effect, bool) {
	now = f.keyTime(now)
	start, count := f.current(now, r.Window)
	if n > count {
		return Outcome{}, Effect{}, false
	}
	f.set(start, count-n, f.alignedTo(start, r.Window))
	return f.Peek(now, r, 1), Effect{Life: f.Life(now, r), Changed: true}, true
}

// keyTime is the time a request at now is decided at: the window's start,
// when now is behind it by at most MaxSkew.
func (f *Fixed) keyTime(now int64) int64 {
	if !f.started || f.start <= now {
		return now // the common case, inlined
	}
	return keyTime(now, f.start)
}

// set writes the state's every field (see Outcome.set): a started window.
func (f *Fixed) set(start, count, aligned int64) {
	f.start, f.count, f.aligned, f.started = start, count, aligned, true
}

// alignedTo is the window length that start, the start of the current
// window under window, is known to be aligned to: window, unless start is
// an older window's kept under another length.
func (f *Fixed) alignedTo(start, window int64) int64 {
	if start == f.start && f.aligned != window {
		return 0
	}
	return window
}

// Empty reports whether the state holds no window.
func (f *Fixed) Empty() bool { return !f.started }

// Life is how long after now the state still matters: until its window ends.
func (f *Fixed) Life(now int64, r Rate) int64 { return fixedEnd(f.start, r.Window) - now }

// fixedEnd is when the window that started at start ends under window: at
// the first aligned boundary after it, where the next window replaces it
// (start+window, unless the window's length changed since it started).
func fixedEnd(start, window int64) int64 { return WindowStart(start, window) + window }
