package memory

import (
	"time"

	"github.com/ratelimit-go/ratelimit/algorithm"
	"github.com/ratelimit-go/ratelimit/backend"
)

// state is a key's state under one algorithm: algorithm's types, which
// decide by the rules package algorithm states. A table holds one of them
// inline in each record.
type state interface {
	Peek(now int64, r algorithm.Rate, n int64) algorithm.Outcome
	Refund(now int64, r algorithm.Rate, n int64) (algorithm.Outcome, algorithm.Effect, bool)
	Undo(now, at int64, r algorithm.Rate, n int64) (algorithm.Outcome, algorithm.Effect)
	Charge(now int64, r algorithm.Rate, n int64) (algorithm.Outcome, algorithm.Effect)
}

// stateOf is the pointer type P of a state S, for the generic tables.
type stateOf[S any] interface {
	*S
	state
}

// empty is one empty state per algorithm, for peeks at keys not held: a peek
// writes nothing, so they stay empty.
var empty = [...]state{&algorithm.Log{}, &algorithm.Fixed{}, &algorithm.SlidingCounter{}, &algorithm.Bucket{}}

// takeTo is st.TakeTo called on its concrete type: a call through the
// generic tables' dictionary would make escape analysis give up on rate and
// out, which would then be allocated on every decision.
func takeTo[S any](st *S, now int64, rate *algorithm.Rate, n int64, out *algorithm.Outcome) algorithm.Effect {
	switch st := any(st).(type) {
	case *algorithm.Bucket:
		return st.TakeTo(now, rate, n, out)
	case *algorithm.Fixed:
		return st.TakeTo(now, rate, n, out)
	case *algorithm.SlidingCounter:
		return st.TakeTo(now, rate, n, out)
	case *algorithm.Log:
		return st.TakeTo(now, rate, n, out)
	}
	return algorithm.Effect{}
}

// held is the number of log entries st holds: 0 but for a sliding log.
func held[S any](st *S) int {
	if l, ok := any(st).(*algorithm.Log); ok {
		return l.Len()
	}
	return 0
}

// wrote extends r's expiry after a write at storeNow that says it counts for
// life more (see algorithm.Outcome), keeping it at least the rule's
// retention; a decision on the caller's clock (callerNow not 0), which the
// store's own does not follow, KeepSlack more (see package backend).
func (r *record[S]) wrote(storeNow, life, retain, callerNow int64) {
	if life > 0 {
		if callerNow != 0 {
			storeNow += keepSlack
		}
		r.expireAt = max(r.expireAt, storeNow+max(life, retain))
	}
}

// keepSlack is backend.KeepSlack in µs.
const keepSlack = int64(backend.KeepSlack / time.Microsecond)
