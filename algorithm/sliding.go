package algorithm

import "sort"

// Log is the sliding-window log of one key: the times of its admitted
// requests, ascending. The zero value is an empty log. It is not safe for
// concurrent use; the store guards it.
//
// Pruning advances a head index instead of moving memory, and the buffer is
// compacted only when an append would otherwise grow it, so a warm key
// decides without allocating.
type Log struct {
	buf  []int64 // buf[head:] are the entries, ascending
	head int
}

// Len is the number of entries held (some may be outside the window until
// the next Take prunes them).
func (l *Log) Len() int { return len(l.buf) - l.head }

// Newest is the time of the latest entry, or false if the log is empty.
func (l *Log) Newest() (int64, bool) {
	if l.Len() == 0 {
		return 0, false
	}
	return l.buf[len(l.buf)-1], true
}

// Take decides a request of cost n at now, recording it if admitted.
func (l *Log) Take(now, window int64, limit, n int) Outcome {
	return l.decide(now, window, limit, n, true)
}

// Peek decides as Take would and changes nothing, not even the pruning.
func (l *Log) Peek(now, window int64, limit, n int) Outcome {
	return l.decide(now, window, limit, n, false)
}

func (l *Log) decide(now, window int64, limit, n int, record bool) Outcome {
	if record {
		l.prune(now - window)
	}
	e := l.buf[l.head:]
	first := firstAfter(e, now-window) // a peek skips what a Take would prune
	e = e[first:]
	count := len(e)
	out := Outcome{Allowed: count+n <= limit, Count: count, ResetAt: now, At: now}
	if !out.Allowed {
		out.RetryAfter = retryAfter(e, count+n-limit, now, window)
	} else if record {
		l.insert(now, n)
		e = l.buf[l.head+first:]
		out.Count += n
	}
	if len(e) > 0 {
		out.ResetAt = e[0] + window
	}
	return out
}

// retryAfter is how long until the k-th oldest of the entries e leaves the
// window. A cost above the limit can never fit: it gets a whole window.
func retryAfter(e []int64, k int, now, window int64) int64 {
	if k > len(e) {
		return window
	}
	return e[k-1] + window - now
}

// prune drops the entries at or before cutoff.
func (l *Log) prune(cutoff int64) {
	l.head += firstAfter(l.buf[l.head:], cutoff)
	if l.head == len(l.buf) {
		l.buf, l.head = l.buf[:0], 0
	}
}

// firstAfter is the index of the first entry later than t.
func firstAfter(e []int64, t int64) int {
	// Entries are usually all in the window: check the front before searching.
	if len(e) == 0 || e[0] > t {
		return 0
	}
	return sort.Search(len(e), func(i int) bool { return e[i] > t })
}

// insert records n entries at now, keeping the log sorted: a request whose
// clock is slightly behind the newest entry goes in its place.
func (l *Log) insert(now int64, n int) {
	if len(l.buf)+n > cap(l.buf) && l.head > 0 {
		// Reuse the pruned front before growing the buffer.
		k := copy(l.buf, l.buf[l.head:])
		l.buf, l.head = l.buf[:k], 0
	}
	e := l.buf[l.head:]
	at := len(e)
	if at > 0 && e[at-1] > now {
		at = firstAfter(e, now)
	}
	for i := 0; i < n; i++ {
		l.buf = append(l.buf, 0)
	}
	e = l.buf[l.head:]
	copy(e[at+n:], e[at:len(e)-n])
	for i := at; i < at+n; i++ {
		e[i] = now
	}
}
