package algorithm

// refLog is the Log's rules on a plain slice of (time, cost) pairs, as the
// Log held them before its entries became words: TestALogAnswersAsItsPairsDid
// holds the Log to it.
type refLog struct{ e []Entry }

func (l *refLog) Len() int { return len(l.e) }

func (l *refLog) sum(e []Entry) int64 {
	total := int64(0)
	for _, x := range e {
		total += x.Cost
	}
	return total
}

func (l *refLog) keyTime(now int64) int64 {
	if len(l.e) == 0 {
		return now
	}
	return keyTime(now, l.e[len(l.e)-1].At)
}

// settle moves the entries later than now to now and drops those at or
// before now-window; it reports whether it changed anything.
func (l *refLog) settle(now, window int64) bool {
	changed := false
	kept := l.e[:0]
	for _, x := range l.e {
		if x.At > now {
			x.At, changed = now, true
		}
		if x.At <= now-window {
			changed = true
			continue
		}
		kept = append(kept, x)
	}
	l.e = kept
	return changed
}

// answer is the outcome of n at now on entries e (in the window), which
// record nothing.
func (l *refLog) answer(now int64, r Rate, n int64, e []Entry) (out Outcome) {
	count := l.sum(e)
	out.set(count, now, now)
	if n > r.Limit-count {
		retry, k := r.Window, count+n-r.Limit
		for _, x := range e {
			if k -= x.Cost; k <= 0 {
				retry = min(x.At, now) + r.Window - now
				break
			}
		}
		out.deny(retry)
	}
	if len(e) > 0 {
		out.ResetAt = min(e[0].At, now) + r.Window
	}
	return out
}

func (l *refLog) Take(now int64, r Rate, n int64) (Outcome, Effect) {
	now = l.keyTime(now)
	changed := l.settle(now, r.Window)
	if count := l.sum(l.e); n > r.Limit-count {
		return l.answer(now, r, n, l.e), Effect{Changed: changed}
	}
	l.e = append(l.e, Entry{At: now, Cost: n})
	out := l.answer(now, r, 0, l.e)
	return out, Effect{Life: r.Window, Changed: true}
}

func (l *refLog) Peek(now int64, r Rate, n int64) Outcome {
	now = l.keyTime(now)
	first := 0
	for first < len(l.e) && l.e[first].At <= now-r.Window {
		first++
	}
	return l.answer(now, r, n, l.e[first:])
}

func (l *refLog) life(now int64, r Rate) int64 {
	if len(l.e) == 0 {
		return 0
	}
	return min(l.e[len(l.e)-1].At, now) + r.Window - now
}

func (l *refLog) Refund(now int64, r Rate, n int64) (Outcome, Effect, bool) {
	now = l.keyTime(now)
	if n > l.Peek(now, r, 1).Count {
		return Outcome{}, Effect{}, false
	}
	l.settle(now, r.Window)
	for n > 0 {
		last := &l.e[len(l.e)-1]
		took := min(last.Cost, n)
		if last.Cost -= took; last.Cost == 0 {
			l.e = l.e[:len(l.e)-1]
		}
		n -= took
	}
	return l.Peek(now, r, 1), Effect{Life: l.life(now, r), Changed: true}, true
}

func (l *refLog) Charge(now int64, r Rate, n int64) (Outcome, Effect) {
	now = l.keyTime(now)
	l.settle(now, r.Window)
	fit := n <= r.Limit-l.sum(l.e)
	keep := r.Limit + 1
	l.e = append(l.e, Entry{At: now, Cost: min(n, keep)})
	for excess := l.sum(l.e) - keep; excess > 0; { // the oldest units go
		took := min(l.e[0].Cost, excess)
		if l.e[0].Cost -= took; l.e[0].Cost == 0 {
			l.e = l.e[1:]
		}
		excess -= took
	}
	return charged(l.Peek(now, r, 1), fit), Effect{Life: l.life(now, r), Changed: true}
}

func (l *refLog) Undo(now, at int64, r Rate, n int64) (Outcome, Effect) {
	now = l.keyTime(now)
	changed := l.settle(now, r.Window)
	i := len(l.e) // after the entries at at, newest first
	for i > 0 && l.e[i-1].At > at {
		i--
	}
	for ; i > 0 && l.e[i-1].At == at && n > 0; i-- {
		took := min(l.e[i-1].Cost, n)
		l.e[i-1].Cost -= took
		n -= took
		changed = true
	}
	kept := l.e[:0]
	for _, x := range l.e {
		if x.Cost > 0 {
			kept = append(kept, x)
		}
	}
	l.e = kept
	if !changed {
		return l.Peek(now, r, 1), Effect{}
	}
	return l.Peek(now, r, 1), Effect{Life: l.life(now, r), Changed: true}
}
