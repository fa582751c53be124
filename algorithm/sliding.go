package algorithm

import "sort"

// Log is the sliding-window log of one key: its admitted requests, one
// entry each whatever its cost, in order of time. The zero value is an empty
// log. It is not safe for concurrent use; the store guards it.
//
// Pruning advances a head index instead of moving memory, and the buffer is
// compacted only when an append would otherwise grow it, so a warm key
// decides without allocating.
type Log struct {
	buf   []Entry // buf[head:] are the entries, ascending by time
	head  int
	total int64 // the sum of the costs of buf[head:]
}

// Entry is one admitted request: its time and its cost.
type Entry struct{ At, Cost int64 }

// Len is the number of entries held (some may be outside the window until
// the next Take prunes them).
func (l *Log) Len() int { return len(l.buf) - l.head }

// Take decides a request of cost n at now, recording it if admitted.
func (l *Log) Take(now int64, r Rate, n int64) (out Outcome, e Effect) {
	e = l.decide(now, &r, n, true, &out)
	return out, e
}

// TakeTo is Take, its outcome written to out: a store's hot path copies no
// Outcome.
func (l *Log) TakeTo(now int64, r *Rate, n int64, out *Outcome) Effect {
	return l.decide(now, r, n, true, out)
}

// Peek decides as Take would and changes nothing, not even the pruning.
func (l *Log) Peek(now int64, r Rate, n int64) (out Outcome) {
	l.decide(now, &r, n, false, &out)
	return out
}

func (l *Log) decide(now int64, r *Rate, n int64, record bool, out *Outcome) Effect {
	now = l.keyTime(now)
	cutoff := now - r.Window // an entry at t is in the window while t > cutoff
	if !record {
		// A peek skips what a Take would prune, and writes nothing.
		first := firstAfter(l.buf[l.head:], cutoff)
		count := l.total
		for _, x := range l.buf[l.head : l.head+first] {
			count -= x.Cost
		}
		answer(now, r, n, count, l.buf[l.head+first:], out)
		return Effect{}
	}
	changed := l.retime(now)
	changed = l.prune(cutoff) || changed
	count := l.total       // what the pruning left is in the window
	if n > r.Limit-count { // a denial writes nothing but the pruning
		answer(now, r, n, count, l.buf[l.head:], out)
		return Effect{Changed: changed}
	}
	l.insert(now, n)
	out.set(count+n, min(l.buf[l.head].At, now)+r.Window, now)
	return Effect{Life: r.Window, Changed: true} // the new entry is the newest
}

// answer writes to out the decision on a request of cost n at now that
// records nothing (a peek, a denial), the window holding count in its
// entries e.
func answer(now int64, r *Rate, n, count int64, e []Entry, out *Outcome) {
	out.set(count, now, now)
	if n > r.Limit-count {
		out.deny(retryAfter(e, count+n-r.Limit, now, r.Window))
	}
	if len(e) > 0 {
		out.ResetAt = min(e[0].At, now) + r.Window
	}
}

// retryAfter is how long until the entry holding the k-th oldest unit of e
// leaves the window. A cost above the limit can never fit: it gets a whole
// window.
func retryAfter(e []Entry, k, now, window int64) int64 {
	for _, x := range e {
		if k -= x.Cost; k <= 0 {
			return min(x.At, now) + window - now
		}
	}
	return window
}

// keyTime is the time a request at now is decided at: the newest entry's,
// when now is behind it by at most MaxSkew.
func (l *Log) keyTime(now int64) int64 {
	if len(l.buf) == l.head {
		return now
	}
	return keyTime(now, l.buf[len(l.buf)-1].At)
}

// retime moves the entries later than now to now (see the package rules),
// and reports whether it moved any.
func (l *Log) retime(now int64) bool {
	moved := false
	for i := len(l.buf) - 1; i >= l.head && l.buf[i].At > now; i-- {
		l.buf[i].At, moved = now, true
	}
	return moved
}

// prune drops the entries at or before cutoff, and reports whether it
// dropped any. It reads them one by one from the oldest, as it subtracts
// each one's cost from the total anyway: a search first (firstAfter) cost
// an admitting log a call and a fifth more of its own instructions.
func (l *Log) prune(cutoff int64) bool {
	h := l.head
	for h < len(l.buf) && l.buf[h].At <= cutoff {
		l.total -= l.buf[h].Cost
		h++
	}
	if h == l.head {
		return false
	}
	l.head = h
	if h == len(l.buf) {
		l.buf, l.head = l.buf[:0], 0
	}
	return true
}

// firstAfter is the index of the first entry later than t.
func firstAfter(e []Entry, t int64) int {
	// Entries are usually all in the window, or the oldest one or few have
	// just left it (under a steady load, one leaves as one comes): the
	// front is read before searching. The search alone cost an admitting
	// sliding log 15% of its decision (bench/peers).
	for i := range min(len(e), frontScan) {
		if e[i].At > t {
			return i
		}
	}
	if len(e) <= frontScan {
		return len(e)
	}
	return frontScan + sort.Search(len(e)-frontScan, func(i int) bool { return e[frontScan+i].At > t })
}

// frontScan is how many of the oldest entries firstAfter reads one by one.
const frontScan = 4

// compactAt: a full buffer is compacted when at least 1/compactAt of it
// was pruned, and grown otherwise.
const compactAt = 4

// insert records an entry of cost n at now, after every other (retime has
// brought them to now at the latest).
func (l *Log) insert(now, n int64) {
	if len(l.buf) == cap(l.buf) && l.head > 0 && l.head >= cap(l.buf)/compactAt {
		// Reuse the pruned front before growing the buffer, once it is a
		// quarter of it: a buffer that a window's entries filled was
		// copied whole on every admission that pruned one
		// (BenchmarkLogAtItsBuffersSize). An append copies at most three
		// entries so, on average, and a buffer grows only when more than
		// three quarters of it are in use.
		k := copy(l.buf, l.buf[l.head:])
		l.buf, l.head = l.buf[:k], 0
	}
	l.buf = append(l.buf, Entry{At: now, Cost: n})
	l.total += n
}

// Refund gives back n units, dropping them from the newest entries; false,
// changing nothing, if the window holds fewer than n.
func (l *Log) Refund(now int64, r Rate, n int64) (Outcome, Effect, bool) {
	now = l.keyTime(now)
	if n > l.Peek(now, r, 1).Count {
		return Outcome{}, Effect{}, false
	}
	l.retime(now)
	l.prune(now - r.Window)
	l.total -= n
	for n > 0 {
		last := &l.buf[len(l.buf)-1]
		if last.Cost > n {
			last.Cost -= n
			break
		}
		n -= last.Cost
		l.buf = l.buf[:len(l.buf)-1]
	}
	if l.head == len(l.buf) {
		l.buf, l.head = l.buf[:0], 0
	}
	return l.Peek(now, r, 1), Effect{Life: l.Life(now, r), Changed: true}, true
}

// Empty reports whether the log holds no entry.
func (l *Log) Empty() bool { return l.Len() == 0 }

// Life is how long after now the state still matters: until its newest
// entry leaves the window.
func (l *Log) Life(now int64, r Rate) int64 {
	if l.Len() == 0 {
		return 0
	}
	return min(l.buf[len(l.buf)-1].At, now) + r.Window - now
}
