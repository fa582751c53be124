package conformance

import (
	"math/big"

	"github.com/ratelimit-go/ratelimit/backend"
)

// ceilRat is ceil(r) for r >= 0.
func ceilRat(r *big.Rat) int64 {
	q, rem := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if rem.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// bucketNow is the bucket at now under p, as written or drained since, in
// p's terms.
func (m *Model) bucketNow(st state, now int64, r *backend.Rule) bucketState {
	interval := big.NewRat(r.Window(), r.Limit())
	b, ok := m.gcra[st]
	if !ok || b.level.Sign() == 0 {
		return bucketState{at: now, level: new(big.Rat), interval: interval}
	}
	level := new(big.Rat).Set(b.level)
	if b.interval.Cmp(interval) != 0 { // another rate: as many requests, at most a burst
		reqs := min(ceilRat(new(big.Rat).Quo(level, b.interval)), r.Burst())
		level.Mul(big.NewRat(reqs, 1), interval)
	}
	if now > b.at {
		level.Sub(level, big.NewRat(now-b.at, 1))
		if level.Sign() < 0 {
			level.SetInt64(0)
		}
	}
	return bucketState{at: now, level: level, interval: interval}
}

func (m *Model) decideGCRA(st state, now int64, req backend.Request, record bool) outcome {
	b := m.bucketNow(st, now, req.Rule)
	old, ok := m.gcra[st]
	cost := new(big.Rat).Mul(big.NewRat(req.Cost, 1), b.interval)
	capacity := new(big.Rat).Mul(big.NewRat(req.Rule.Burst(), 1), b.interval)
	after := new(big.Rat).Add(b.level, cost)
	out := outcome{Allowed: after.Cmp(capacity) <= 0, At: now}
	level := b.level
	switch {
	case !out.Allowed:
		out.RetryAfter = ceilRat(new(big.Rat).Sub(after, capacity))
		if record && ok && old.level.Sign() > 0 && old.at > now {
			m.gcra[st] = b
		}
	case record:
		level = after
		m.gcra[st] = bucketState{at: now, level: after, interval: b.interval}
	}
	out.Count = ceilRat(new(big.Rat).Quo(level, b.interval))
	out.ResetAt = now
	if out.Count > 0 { // when the level falls to count-1 requests' worth
		below := new(big.Rat).Mul(big.NewRat(out.Count-1, 1), b.interval)
		out.ResetAt = now + ceilRat(new(big.Rat).Sub(level, below))
	}
	return out
}
