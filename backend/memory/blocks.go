package memory

import (
	"github.com/ratelimit-go/ratelimit/algorithm"
	"github.com/ratelimit-go/ratelimit/backend"
)

// blocked is a penalty box (backend.Rule.Block): the state of its record's
// key and scope denies everything until until (µs).
type blocked struct{ until int64 }

// boxed does o for req, whose rule has a penalty box, on the shard, whose
// lock is held: a key in its box is denied, any op (a charge, a refund or
// an undo still does its work, and answers as a peek afterwards would); a
// take that is denied, or a charge that does not fit, puts it there for
// the rule's block.
func (sh *shard) boxed(req *backend.Request, rd *ruled, h uint64, now, storeNow int64, o op, out *algorithm.Outcome) error {
	until := int64(0)
	if ref, r := sh.blocks.find(h, req.Key, rd.scope); r != nil && r.st.until > now {
		sh.blocks.used(ref, r)
		until = r.st.until
	}
	if until == 0 || o != take && o != peek {
		var err error
		switch o {
		case take:
			err = sh.takeIn(req, rd, h, now, storeNow, out)
		case charge:
			err = sh.charge(req, rd, h, now, storeNow, out)
		default:
			err = sh.decideUnboxed(req, rd, h, now, storeNow, o, out)
		}
		if err != nil || until == 0 && (out.Allowed() || o != take && o != charge) {
			return err
		}
	}
	if until == 0 { // denied now: boxed from now on
		var err error
		if until, err = sh.box(req, rd, h, now, storeNow); err != nil {
			return err
		}
	}
	boxedOutcome(out, until, now, req.Rule.MaxCost())
	return nil
}

// boxDenied puts req's key, just denied as out says, in its penalty box
// unless it is there already, and makes out its denial.
func (sh *shard) boxDenied(req *backend.Request, rd *ruled, h uint64, now, storeNow int64, out *algorithm.Outcome) error {
	if _, r := sh.blocks.find(h, req.Key, rd.scope); r != nil && r.st.until > now {
		return nil // boxed already: out says so
	}
	until, err := sh.box(req, rd, h, now, storeNow)
	if err == nil {
		boxedOutcome(out, until, now, req.Rule.MaxCost())
	}
	return err
}

// box puts req's key in its penalty box from now, and says until when.
func (sh *shard) box(req *backend.Request, rd *ruled, h uint64, now, storeNow int64) (int64, error) {
	_, r, err := enter(sh, &sh.blocks, req, rd, h, storeNow)
	if err != nil {
		return 0, err
	}
	r.st.until = now + rd.block
	r.wrote(storeNow, rd.block, 0, req.Now)
	return r.st.until, nil
}

// boxedOutcome is the denial of a key in its penalty box until until.
func boxedOutcome(out *algorithm.Outcome, until, now, maxCost int64) {
	*out = algorithm.Outcome{Count: maxCost, ResetAt: until, RetryAfter: until - now, At: now}
}
