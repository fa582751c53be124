package conformance

import (
	"cmp"
	"slices"

	"github.com/ratelimit-go/ratelimit/backend"
)

// lease is a permit held: its holder's id, and when its lease ends.
type lease struct{ id, until int64 }

// Acquire takes a permit of req's key as id, or renews id's, as a store's
// Acquire must.
func (m *Model) Acquire(req backend.Request, id int64) backend.Outcome {
	return m.permitsAt(req, id, true)
}

// Release gives permit id back, as a store's Release must.
func (m *Model) Release(req backend.Request, id int64) backend.Outcome {
	return m.permitsAt(req, id, false)
}

// permitsAt decides on req's permits at its time: an acquisition of id
// (acquire), a release of id, or with id 0 a peek of req.Cost permits.
// The leases whose end has come are no more; a write keeps what is left.
func (m *Model) permitsAt(req backend.Request, id int64, acquire bool) backend.Outcome {
	st, w, limit := stateOf(req), req.Rule.Window(), req.Rule.Limit()
	now := req.Now
	if held := m.permits[st]; len(held) > 0 { // the key's time: the latest lease's end less the lease
		latest := slices.MaxFunc(held, func(a, b lease) int { return cmp.Compare(a.until, b.until) }).until - w
		if latest > now && latest-now <= backend.MaxSkew.Microseconds() {
			now = latest
		}
	}
	var live []lease
	for _, l := range m.permits[st] {
		if l.until > now {
			live = append(live, l)
		}
	}
	i := slices.IndexFunc(live, func(l lease) bool { return l.id == id })
	n := int64(1) // what must fit: the permit asked for, or after a release, a peek of one
	switch {
	case id == 0:
		n = req.Cost
	case acquire && i >= 0: // held: renewed, whatever else is held
		live[i].until, n = now+w, 0
		m.permits[st] = live
	case acquire && int64(len(live)) < limit:
		live = append(live, lease{id, now + w})
		m.permits[st], n = live, 0
	case !acquire && i >= 0:
		live = slices.Delete(live, i, i+1)
		m.permits[st] = live
	}
	ends := make([]int64, len(live))
	for j, l := range live {
		ends[j] = l.until
	}
	slices.Sort(ends)
	out := outcome{Allowed: n == 0 || n <= limit-int64(len(ends)), Count: int64(len(ends)), ResetAt: now, At: now}
	if len(ends) > 0 {
		out.ResetAt = ends[0]
	}
	if !out.Allowed { // until enough leases end for n to fit; more than the limit: one lease
		out.RetryAfter = w
		if k := int64(len(ends)) + n - limit; k <= int64(len(ends)) {
			out.RetryAfter = ends[k-1] - now
		}
	}
	return out.answer()
}
