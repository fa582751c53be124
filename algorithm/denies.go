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
