package conformance

import "github.com/ratelimit-go/ratelimit/backend"

// The penalty box (backend.Rule.Block): a key that a take denies, or that a
// charge takes past its quota, is denied everything until its box ends.

// TakeAll decides reqs together as a Store's TakeAll must: every request
// admitted and recorded, or none recorded, each answered as its peek; the
// denied keys of rules with a penalty box go there.
func (m *Model) TakeAll(reqs []backend.Request) []backend.Outcome {
	outs := make([]backend.Outcome, len(reqs))
	all := true
	for i, req := range reqs {
		outs[i] = m.Peek(req)
		all = all && outs[i].Allowed()
	}
	for i, req := range reqs {
		st := stateOf(req)
		switch {
		case all:
			outs[i] = m.Take(req)
		case !outs[i].Allowed() && req.Rule.Block() > 0 && m.boxes[st] <= req.Now:
			m.boxes[st] = req.Now + req.Rule.Block()
			outs[i] = boxedOutcome(req, m.boxes[st])
		}
	}
	return outs
}

// boxed is decide's outcome under req's penalty box: a key in its box is
// denied (a charge is still recorded: always); a decision that did not fit
// puts it there for the rule's block.
func (m *Model) boxed(req backend.Request, always bool, decide func() (backend.Outcome, bool)) backend.Outcome {
	if req.Rule.Block() == 0 {
		out, _ := decide()
		return out
	}
	st := stateOf(req)
	if until := m.boxes[st]; until > req.Now {
		if always {
			decide()
		}
		return boxedOutcome(req, until)
	}
	out, fit := decide()
	if fit {
		return out
	}
	m.boxes[st] = req.Now + req.Rule.Block()
	return boxedOutcome(req, m.boxes[st])
}

// boxedOutcome is the denial of req's key, in its penalty box until until.
func boxedOutcome(req backend.Request, until int64) backend.Outcome {
	return backend.Outcome{Count: req.Rule.MaxCost(), ResetAt: until, RetryAfter: until - req.Now, At: req.Now}
}
