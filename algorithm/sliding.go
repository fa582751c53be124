package algorithm

import "sort"

// Log is the sliding-window log of one key: its admitted requests, one
// entry each whatever its cost, in order of time. The zero value is an empty
// log. It is not safe for concurrent use; the store guards it.
//
// Pruning advances a head index instead of moving memory, and the buffer is
// compacted only when an append would otherwise grow it, so a warm key
// decides without allocating. An entry is one word, its time, when its cost
// is 1 (most requests), and two otherwise: its time, then minus its cost.
// Times are never negative (MaxStored), so a word tells which it is. Half
// the words of a (time, cost) pair: a log's oldest entry, which every Take
// reads, is a cache miss half as often, and a log holds twice the requests
// in the same memory (docs/figures.md, "A sliding log's entries, a word").
type Log struct {
	buf   []int64 // buf[head:] are the entries, ascending by time
	head  int     // the first word of the oldest entry
	n     int     // the entries held
	total int64   // the sum of the costs of buf[head:]
}

// Entry is one admitted request: its time and its cost.
type Entry struct{ At, Cost int64 }

// Len is the number of entries held (some may be outside the window until
// the next Take prunes them).
func (l *Log) Len() int { return l.n }

// entryAt is the entry whose time is e[i], and the index of the one after.
func entryAt(e []int64, i int) (x Entry, next int) {
	x = Entry{At: e[i], Cost: 1}
	if i++; i < len(e) && e[i] < 0 {
		x.Cost = -e[i]
		i++
	}
	return x, i
}

// costOf is the sum of the costs of the entries e holds.
func costOf(e []int64) int64 {
	sum := int64(0)
	for _, w := range e {
		if w < 0 {
			sum += -w - 1 // its time counted 1
		} else {
			sum++
		}
	}
	return sum
}

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
	changed := false
	if l.n > 0 { // keyTime and retime, reading the newest entry once
		newest := l.newest()
		if now = keyTime(now, newest); newest > now && record {
			changed = l.retime(now)
		}
	}
	cutoff := now - r.Window // an entry at t is in the window while t > cutoff
	if !record {
		// A peek skips what a Take would prune, and writes nothing.
		e := l.buf[l.head:]
		first := firstAfter(e, cutoff)
		answer(now, r, n, l.total-costOf(e[:first]), e[first:], out)
		return Effect{}
	}
	changed = l.prune(cutoff) || changed
	count := l.total       // what the pruning left is in the window
	if n > r.Limit-count { // a denial writes nothing but the pruning
		answer(now, r, n, count, l.buf[l.head:], out)
		return Effect{Changed: changed}
	}
	l.insert(now, n)
	out.set(count+n, min(l.buf[l.head], now)+r.Window, now)
	return Effect{Life: r.Window, Changed: true} // the new entry is the newest
}

// answer writes to out the decision on a request of cost n at now that
// records nothing (a peek, a denial), the window holding count in its
// entries e.
func answer(now int64, r *Rate, n, count int64, e []int64, out *Outcome) {
	out.set(count, now, now)
	if n > r.Limit-count {
		out.deny(retryAfter(e, count+n-r.Limit, now, r.Window))
	}
	if len(e) > 0 {
		out.ResetAt = min(e[0], now) + r.Window
	}
}

// retryAfter is how long until the entry holding the k-th oldest unit of e
// leaves the window. A cost above the limit can never fit: it gets a whole
// window.
func retryAfter(e []int64, k, now, window int64) int64 {
	for i := 0; i < len(e); {
		x, next := entryAt(e, i)
		if k -= x.Cost; k <= 0 {
			return min(x.At, now) + window - now
		}
		i = next
	}
	return window
}

// keyTime is the time a request at now is decided at: the newest entry's,
// when now is behind it by at most MaxSkew.
func (l *Log) keyTime(now int64) int64 {
	if l.n == 0 {
		return now
	}
	return keyTime(now, l.newest())
}

// newest is the newest entry's time; the log holds one.
func (l *Log) newest() int64 {
	last := len(l.buf) - 1
	if l.buf[last] < 0 {
		last--
	}
	return l.buf[last]
}

// retime moves the entries later than now to now (see the package rules),
// and reports whether it moved any.
func (l *Log) retime(now int64) bool {
	moved := false
	for i := len(l.buf) - 1; i >= l.head; i-- {
		if l.buf[i] < 0 { // a cost
			continue
		}
		if l.buf[i] <= now {
			break
		}
		l.buf[i], moved = now, true
	}
	return moved
}

// prune drops the entries at or before cutoff, and reports whether it
// dropped any. It reads them one by one from the oldest, as it subtracts
// each one's cost from the total anyway: a search first (firstAfter) cost
// an admitting log a call and a fifth more of its own instructions. A
// cutoff below 0 drops nothing, as no time is; at or above 0, a cost's word
// (below 0) goes with its time.
func (l *Log) prune(cutoff int64) bool {
	h, n, total := l.head, l.n, l.total
	for ; h < len(l.buf) && l.buf[h] <= cutoff; h++ {
		if w := l.buf[h]; w < 0 {
			total += w + 1 // its cost less the 1 its time counted
		} else {
			n, total = n-1, total-1
		}
	}
	changed := h != l.head
	l.head, l.n, l.total = h, n, total
	return changed
}

// firstAfter is the index in e (entries) of the first entry later than t.
func firstAfter(e []int64, t int64) int {
	// Entries are usually all in the window, or the oldest one or few have
	// just left it (under a steady load, one leaves as one comes): the
	// front is read before searching. The search alone cost an admitting
	// sliding log 15% of its decision (bench/peers).
	for i := range min(len(e), frontScan) {
		if e[i] >= 0 && e[i] > t { // a time, not a cost
			return i
		}
	}
	if len(e) <= frontScan {
		return len(e)
	}
	// A cost's word answers as its entry's time does, so the first word
	// past t is an entry's time: were it a cost, its time would be first.
	return frontScan + sort.Search(len(e)-frontScan, func(i int) bool {
		w := e[frontScan+i]
		if w < 0 {
			w = e[frontScan+i-1]
		}
		return w > t
	})
}

// frontScan is how many of the oldest words firstAfter reads one by one.
const frontScan = 4

// compactAt: a full buffer is compacted when at least 1/compactAt of it
// was pruned, and grown otherwise.
const compactAt = 4

// insert records an entry of cost n at now, after every other (retime has
// brought them to now at the latest).
func (l *Log) insert(now, n int64) {
	if len(l.buf)+2 > cap(l.buf) && l.head > 0 && l.head >= cap(l.buf)/compactAt {
		l.compact()
	}
	if l.buf = append(l.buf, now); n != 1 {
		l.buf = append(l.buf, -n)
	}
	l.n++
	l.total += n
}

// compact moves the entries to the front of the buffer. A full buffer's
// pruned front is reused before it grows, once it is a quarter of it: a
// buffer that a window's entries filled was copied whole on every
// admission that pruned one (BenchmarkLogAtItsBuffersSize). An append
// copies at most three words so, on average, and a buffer grows only when
// more than three quarters of it are in use.
func (l *Log) compact() {
	k := copy(l.buf, l.buf[l.head:])
	l.buf, l.head = l.buf[:k], 0
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
		last := len(l.buf) - 1
		cost := int64(1)
		if l.buf[last] < 0 {
			cost = -l.buf[last]
		}
		if cost > n {
			l.buf = setCost(l.buf, last-1, cost-n)
			break
		}
		n -= cost
		l.buf = l.buf[:last+1-width(cost)]
		l.n--
	}
	if l.head == len(l.buf) {
		l.buf, l.head = l.buf[:0], 0
	}
	return l.Peek(now, r, 1), Effect{Life: l.Life(now, r), Changed: true}, true
}

// width is the words an entry of cost c takes.
func width(c int64) int {
	if c == 1 {
		return 1
	}
	return 2
}

// setCost sets to c (less than its cost, at least 1) the cost of the
// newest entry of buf, whose time is buf[i], and returns buf.
func setCost(buf []int64, i int, c int64) []int64 {
	if c == 1 {
		return buf[:i+1]
	}
	buf[i+1] = -c
	return buf
}

// Empty reports whether the log holds no entry.
func (l *Log) Empty() bool { return l.n == 0 }

// Life is how long after now the state still matters: until its newest
// entry leaves the window.
func (l *Log) Life(now int64, r Rate) int64 {
	if l.n == 0 {
		return 0
	}
	return min(l.newest(), now) + r.Window - now
}
