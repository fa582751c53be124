package algorithm

// Bucket is the GCRA state of one key: the level of its bucket at a time,
// in the units of the rate it was written under. The zero value is empty.
// It is not safe for concurrent use; the store guards it.
type Bucket struct {
	at, level   int64
	unit, drain int64 // the rate it was written under
}

// Take decides a request of cost n at now, recording it if admitted.
func (b *Bucket) Take(now int64, r Rate, n int64) (out Outcome, e Effect) {
	e = b.decide(now, &r, n, true, &out)
	return out, e
}

// TakeTo is Take, its outcome written to out: a store's hot path copies no
// Outcome.
func (b *Bucket) TakeTo(now int64, r *Rate, n int64, out *Outcome) Effect {
	return b.decide(now, r, n, true, out)
}

// Peek decides as Take would and changes nothing.
func (b *Bucket) Peek(now int64, r Rate, n int64) (out Outcome) {
	b.decide(now, &r, n, false, &out)
	return out
}

// levelAt is the level at now, in r's units: a level written under another
// rate counts as its requests' worth rounded up, at most a burst, in r's
// unit, drained at r's rate since it was written (see the package rules).
func (b *Bucket) levelAt(now int64, r *Rate) int64 {
	if b.under(r, now) {
		return b.drainedTo(now, r)
	}
	return b.levelOther(now, r)
}

// under reports whether the level was written under r before now: the
// common case, which drainedTo computes inline (decide's hot path makes
// no call for it: a call is a fiftieth of a decision).
func (b *Bucket) under(r *Rate, now int64) bool {
	return b.unit == r.Unit && b.drain == r.Drain && now > b.at
}

// drainedTo is levelAt when under(r, now). It is drained once now-b.at
// reaches ceilDiv(level, drain): past level-1 µs at a drain of 1 (no
// division), past (level-1)/drain at any other. An empty bucket (level-1
// below 0) is drained.
func (b *Bucket) drainedTo(now int64, r *Rate) int64 {
	elapsed, last := now-b.at, b.level-1
	if r.Drain != 1 {
		last /= r.Drain
	}
	if elapsed > last {
		return 0
	}
	return b.level - elapsed*r.Drain
}

// levelOther is levelAt when not under(r, now).
func (b *Bucket) levelOther(now int64, r *Rate) int64 {
	level := b.level
	if level == 0 {
		return 0
	}
	if b.unit != r.Unit || b.drain != r.Drain { // written under another rate: as many requests, at most a burst
		level = min(ceilDiv(level, b.unit), r.Burst) * r.Unit
	}
	if elapsed := now - b.at; elapsed > 0 { // else from the future: as if written now
		if elapsed >= ceilDiv(level, r.Drain) {
			return 0
		}
		level -= elapsed * r.Drain
	}
	return level
}

func (b *Bucket) decide(now int64, r *Rate, n int64, record bool, out *Outcome) (e Effect) {
	now = b.keyTime(now)
	level, capacity := int64(0), r.Burst*r.Unit
	if b.under(r, now) { // levelAt, inline
		level = b.drainedTo(now, r)
	} else {
		level = b.levelOther(now, r)
	}
	out.set(0, 0, now)
	if n*r.Unit > capacity-level {
		out.deny(ceilDiv(level+n*r.Unit-capacity, r.Drain))
		if record && b.at > now && b.level > 0 {
			b.set(now, level, r) // a Take rewrites state from the future, admitted or not
			e.Changed = true
		}
	} else if record {
		level += n * r.Unit
		b.set(now, level, r)
		e = Effect{Life: ceilDiv(level, r.Drain), Changed: true}
	}
	out.Count, out.ResetAt = bucketCount(level, now, r)
	return e
}

// keyTime is the time a request at now is decided at: the level's, when
// the bucket holds some and now is behind it by at most MaxSkew.
func (b *Bucket) keyTime(now int64) int64 {
	if b.level == 0 || b.at <= now {
		return now
	}
	return keyTime(now, b.at)
}

// set writes the bucket's every field (see Outcome.set): level at now,
// under r.
func (b *Bucket) set(now, level int64, r *Rate) {
	b.at, b.level, b.unit, b.drain = now, level, r.Unit, r.Drain
}

// bucketCount is the requests' worth of quota that level holds, and when
// that number next drops.
func bucketCount(level, now int64, r *Rate) (count, next int64) {
	if level == 0 {
		return 0, now
	}
	// A full bucket (level in (full-unit, full]), the common denial, holds
	// a burst: no division.
	count = r.Burst
	if uint64(count*r.Unit-level) >= uint64(r.Unit) {
		count = ceilDiv(level, r.Unit)
	}
	return count, now + ceilDiv(level-(count-1)*r.Unit, r.Drain)
}

// Refund lowers the level by n requests (to 0 at most); false, changing
// nothing, if it holds fewer than n requests' worth.
func (b *Bucket) Refund(now int64, r Rate, n int64) (Outcome, Effect, bool) {
	now = b.keyTime(now)
	level := b.levelAt(now, &r)
	if n > ceilDiv(level, r.Unit) {
		return Outcome{}, Effect{}, false
	}
	b.set(now, max(level-n*r.Unit, 0), &r)
	return b.Peek(now, r, 1), Effect{Life: b.Life(now, r), Changed: true}, true
}

// Empty reports whether the bucket is empty as written.
func (b *Bucket) Empty() bool { return b.level == 0 }

// Life is how long after now the state still matters: until it drains.
func (b *Bucket) Life(now int64, r Rate) int64 {
	return b.at + ceilDiv(b.level, max(r.Drain, 1)) - now
}
