package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
)

// Usage known only afterwards: an LLM's tokens, bytes sent, seconds of
// compute. Three ways to limit it, by how much may be spent before the
// limit bites:
//
//   - Check, then charge: Peek before the work (a check takes nothing),
//     Charge what it used after. With k requests of one key in flight, the
//     limit is passed by what those k used at most, as each was checked
//     before the others charged.
//   - Reserve, then settle: AllowN an estimate before the work (denied when
//     it does not fit), Settle the difference after (Charge the excess,
//     Undo what was reserved and not used). The limit is then passed by at
//     most what the k in flight used beyond their estimates.
//   - Charge alone, when the work cannot be refused: later requests wait.

// MaxCharge is the largest cost of a Charge: 2^40, as MaxLimit.
const MaxCharge = backend.MaxCharge

// Charge records n of usage known only once the work is done (tokens,
// bytes), whatever the quota left: past the limit if need be, and later
// requests are denied until it has left the window or drained, as if it
// had been admitted (package algorithm states the debt's bounds; a sliding
// log keeps its newest Limit units). The Decision is what Peek says
// afterwards, but Allowed reports whether the charge fit in the quota, and
// RetryAfter is then 0; when it did not, Remaining is 0 and RetryAfter is
// when a request of cost 1 fits again. n must be in [1, MaxCharge]:
// anything else is ErrInvalidCost, with nothing recorded. A charge is
// observed (Event.Charge); the failure mode and dry run apply as to AllowN.
func (l *Limiter) Charge(ctx context.Context, key string, n int) (Decision, error) {
	if err := checkArgs(ctx, key); err != nil {
		return Decision{}, err
	}
	if n < 1 || int64(n) > MaxCharge {
		return Decision{}, fmt.Errorf("%w: a charge of %d, want 1 to %d", ErrInvalidCost, n, int64(MaxCharge))
	}
	var req backend.Request
	c, err := l.request(ctx, key, 1, &req)
	if err != nil {
		return Decision{}, err
	}
	req.Cost = int64(n)
	began := time.Now()
	sctx, budget := l.budget(ctx, began)
	out, err := l.store.Charge(sctx, req)
	budget.end()
	return l.settle(ctx, c, req, OpCharge, true, &out, err, began)
}

// Undo gives back n of what the admission d of key took (AllowN's, Wait's
// or Charge's Decision, n at most its cost), for work admitted and then not
// done, or done for less: the sliding log drops that admission's units,
// not the newest as Refund does; the windows give them back only while the
// window they were counted in still counts (for the counter, the previous
// window too, where they weigh less); GCRA lowers its level as Refund.
// What has already left the window or drained is not given back twice, so
// Undo is never refused for it. It returns what Peek would say afterwards.
// A d that admitted nothing (a denial, a failure mode's admission) takes
// nothing back. n must be in [1, MaxCharge]. Undo is not observed;
// a store failure is returned, wrapping ErrStore, whatever the failure
// mode.
func (l *Limiter) Undo(ctx context.Context, key string, n int, d Decision) (Decision, error) {
	if err := checkArgs(ctx, key); err != nil {
		return Decision{}, err
	}
	if !d.Allowed || d.Source == SourceFailOpen || d.At.IsZero() {
		return l.Peek(ctx, key)
	}
	if n < 1 || int64(n) > MaxCharge {
		return Decision{}, fmt.Errorf("%w: an undo of %d, want 1 to %d", ErrInvalidCost, n, int64(MaxCharge))
	}
	if err := validateTime(d.At); err != nil {
		return Decision{}, err
	}
	var req backend.Request
	c, err := l.request(ctx, key, 1, &req)
	if err != nil {
		return Decision{}, err
	}
	req.Cost, req.Admitted = int64(n), d.At.UnixMicro()
	return l.refund(ctx, c, req)
}

// Settle ends a reservation: d admitted reserved (AllowN(ctx, key,
// reserved)) before work that then used used; a reserved of 0 is a check
// (Peek) that took nothing. The excess is charged (Charge), what was not
// used given back (Undo); with used equal to reserved, it is what Peek
// says. Reserving an estimate before the work keeps k requests in flight
// within the limit but for what they used past their estimates.
func (l *Limiter) Settle(ctx context.Context, key string, d Decision, reserved, used int) (Decision, error) {
	switch {
	case used < 0 || reserved < 0:
		return Decision{}, fmt.Errorf("%w: reserved %d and used %d: want neither negative", ErrInvalidCost, reserved, used)
	case used > reserved:
		return l.Charge(ctx, key, used-reserved)
	case used < reserved:
		return l.Undo(ctx, key, reserved-used, d)
	}
	return l.Peek(ctx, key)
}

// refund sends req, a Refund or an Undo, and makes the Decision of its
// answer.
func (l *Limiter) refund(ctx context.Context, c *compiled, req backend.Request) (Decision, error) {
	sctx, budget := l.budget(ctx, time.Now())
	defer budget.end()
	out, err := l.store.Refund(sctx, req)
	var d Decision
	switch {
	case err == nil:
		decisionTo(&d, out, c.rule.MaxCost())
	case !fellBack(&d, out, err):
		return Decision{}, storeError(err)
	}
	return d, nil
}
