package algorithm

// A denial that leaves the state as it is can be decided on a copy of the
// state: a store may keep such a copy where readers reach it without its
// lock (the memory store does), and answer a key being denied from it. A
// Take writes nothing when it denies, but for a state further in the future
// than MaxSkew (written on another clock), which it moves to now: DeniesTo
// declines those, so that the copy and the state never differ.

// DeniesTo reports whether a Take of n at now would be denied and leave b
// as it is; when it would, out holds that Take's outcome. It writes nothing
// to b, so b may be a copy that other goroutines read too.
func (b *Bucket) DeniesTo(now int64, r *Rate, n int64, out *Outcome) bool {
	if now = b.keyTime(now); b.at > now && b.level > 0 {
		return false
	}
	b.decide(now, r, n, false, out)
	return out.RetryAfter != 0
}

// DeniesTo reports whether a Take of n at now would be denied and leave f
// as it is; when it would, out holds that Take's outcome. It writes nothing
// to f, so f may be a copy that other goroutines read too.
func (f *Fixed) DeniesTo(now int64, r *Rate, n int64, out *Outcome) bool {
	if now = f.keyTime(now); f.started && f.start > now {
		return false
	}
	f.decide(now, r, n, false, out)
	return out.RetryAfter != 0
}

// DeniesTo reports whether a Take of n at now would be denied and leave c
// as it is; when it would, out holds that Take's outcome. It writes nothing
// to c, so c may be a copy that other goroutines read too.
func (c *SlidingCounter) DeniesTo(now int64, r *Rate, n int64, out *Outcome) bool {
	if now = c.keyTime(now); c.started && c.start > now {
		return false
	}
	c.decide(now, r, n, false, out)
	return out.RetryAfter != 0
}

// LogDenial is what a Log's denials need, copied out of it (Log.Denial): a
// log holds an entry per admitted request, too many to copy whole for
// every key being denied, and a denial reads only its oldest entries, its
// newest one's time and the sum of their costs. It declines what its copy
// cannot tell: a window past every entry it holds, a retry past them.
type LogDenial struct {
	oldest [logDenialEntries]Entry // the log's oldest entries, ascending
	n      int                     // how many of oldest are held
	more   bool                    // whether the log holds entries past them
	total  int64                   // the sum of the costs of all its entries
	newest int64                   // the newest entry's time
}

// logDenialEntries is the entries a LogDenial holds: a key denied under a
// steady load sees one leave the window as one could come in, and its
// denials are decided without the lock until this many have left.
const logDenialEntries = 8

// Denial copies what l's denials need. It reads l and writes nothing.
func (l *Log) Denial() LogDenial {
	e := l.buf[l.head:]
	d := LogDenial{total: l.total}
	i := 0
	for ; i < len(e) && d.n < len(d.oldest); d.n++ {
		d.oldest[d.n], i = entryAt(e, i)
	}
	d.more = i < len(e)
	if l.n > 0 {
		d.newest = l.newest()
	}
	return d
}

// DeniesTo reports whether a Take of n at now on the log d was copied from
// would be denied and leave its entries as they are (but for those it
// prunes); when it would, out holds that Take's outcome. It declines (false)
// an admission, a log with an entry from the future, which a Take re-times,
// and whatever needs an entry d does not hold. It writes nothing to d.
func (d *LogDenial) DeniesTo(now int64, r *Rate, n int64, out *Outcome) bool {
	if d.n == 0 {
		return false // an empty log admits any cost up to the limit
	}
	if now = keyTime(now, d.newest); d.newest > now {
		return false
	}
	cutoff := now - r.Window
	e := d.oldest[:d.n]
	first := 0 // the first entry later than cutoff
	for first < len(e) && e[first].At <= cutoff {
		first++
	}
	if first == d.n && d.more {
		return false // every entry held has left: the count is not known
	}
	count := d.total
	for _, x := range e[:first] {
		count -= x.Cost
	}
	if n <= r.Limit-count {
		return false
	}
	e = e[first:]
	retry, k := r.Window, count+n-r.Limit // as retryAfter, over the entries held
	for i, x := range e {
		if k -= x.Cost; k <= 0 {
			retry = min(x.At, now) + r.Window - now
			break
		}
		if i == len(e)-1 && d.more {
			return false // the retry is past the entries held
		}
	}
	out.set(count, now, now)
	out.deny(retry)
	if len(e) > 0 {
		out.ResetAt = min(e[0].At, now) + r.Window
	}
	return true
}
