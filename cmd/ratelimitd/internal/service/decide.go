package service

import (
	"context"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
)

// decide asks the store for every check and fills res: each status, and the
// overall verdict (see verdict).
//
// By default enforced limits are decided together: a request is admitted
// only if every one admits it, and a denial consumes no quota from the
// others (ratelimit.Multi; one atomic step when the store can). This is
// where ratelimitd differs from envoyproxy/ratelimit, which counts every
// hit against every descriptor, denied or not (its issue 1060), unless
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: Options.CountOverLimit counts
// as it does (count). Descriptors with different costs (a per-descriptor
// hits_addend) are decided one by one.
//
// A descriptor's own hits_addend reports usage, counted as upstream counts
// every hit: charged whatever the quota left (ratelimit.Limiter.Charge),
// over the limit once the count passes it; a hits_addend of 0 checks the
// limit without counting (over once the count has passed it). So a token
// budget checked before a request and charged after it (Envoy's AI
// Gateway) is over from the first report that overshoots.
//
// Shadow limits are decided and recorded on their own, and answer OK.
// Quota pools (quota_mode) are decided once the enforced limits admit the
// request, each on its own; when every pool denies, the enforced limits'
// admission is given back (see pools).
func (s *Service) decide(ctx context.Context, checks []check, res *Result) error {
	if s.countAll {
		return s.count(ctx, checks, res)
	}
	var stack [stackChecks]check
	enforced := stack[:0]
	if len(checks) > len(stack) {
		enforced = make([]check, 0, len(checks)) // one allocation, not one per growth
	}
	var pools []check
	for _, c := range checks {
		switch {
		case c.usage:
			if err := use(ctx, c, res); err != nil {
				return err
			}
		case c.rule.Shadow:
			d, err := takeOne(ctx, c)
			if err != nil {
				return err
			}
			record(res, c, d, false, !d.Allowed, d.Allowed)
		case s.quota(c.rule):
			pools = append(pools, c)
		default:
			enforced = append(enforced, c)
		}
	}
	undo, err := enforce(ctx, enforced, res, len(pools) > 0)
	if err != nil {
		return err
	}
	if err := s.pools(ctx, pools, undo, res); err != nil {
		return err
	}
	res.OverLimit = s.verdict(res)
	return nil
}

// count decides as envoyproxy/ratelimit counts (Options.CountOverLimit):
// every descriptor is charged its cost whatever the others answer, over
// once its count passes its limit; a cost of 0 checks. The charges of a
// request's distinct keys go to the store at once (useAll), as upstream
// pipelines its INCRBYs; a key a request names twice is charged in order.
// Charges of one cost on distinct keys are one call (chargeAll).
func (s *Service) count(ctx context.Context, checks []check, res *Result) error {
	var err error
	switch {
	case len(checks) > 1 && chargeable(checks):
		err = chargeAll(ctx, checks, res)
	case len(checks) > 1 && len(checks) <= maxTogether && distinctKeys(checks):
		err = useAll(ctx, checks, res)
	default:
		for _, c := range checks {
			if err = use(ctx, c, res); err != nil {
				break
			}
		}
	}
	if err != nil {
		return err
	}
	res.OverLimit = s.verdict(res)
	return nil
}

// use charges a descriptor's usage (see useOne) into its status.
func use(ctx context.Context, c check, res *Result) error {
	d, over, err := useOne(ctx, c)
	if err != nil {
		return err
	}
	recordUse(res, c, d, over)
	return nil
}

// recordUse records a usage's decision: charged whatever the quota, so
// counted unless a check or a rule of 0.
func recordUse(res *Result, c check, d ratelimit.Decision, over bool) {
	record(res, c, d, over && !c.rule.Shadow, over && c.rule.Shadow, c.limiter != nil && c.cost > 0)
}

// record puts check c's decision into its descriptor's status. A
// descriptor of several limits (a rule's also) keeps the one that binds:
// the one over its limit, else the one with the least remaining; its rule
// is the status's, so the answer names the limit that decided.
func record(res *Result, c check, d ratelimit.Decision, over, shadowed, counted bool) {
	st := &res.Statuses[c.index]
	if st.Asked() {
		was := st.OverLimit || st.Shadowed
		if now := over || shadowed; now != was && !now || now == was && d.Remaining >= st.Decision.Remaining {
			return
		}
	}
	st.Rule, st.Decision, st.OverLimit, st.Shadowed, st.Counted = c.rule, d, over, shadowed, counted
}

// quota reports whether r is a quota pool: its own quota_mode, or every
// rule under Options.QuotaMode. A shadow rule is never one.
func (s *Service) quota(r *config.Rule) bool { return !r.Shadow && (r.Quota || s.quotaMode) }

// verdict is the request's answer from its statuses, as envoyproxy/ratelimit
// gives it: over when a limit that is not a pool is over, or when the
// request matched pools and every one is over. Shadow limits never are.
func (s *Service) verdict(res *Result) bool {
	pools, spent := 0, 0
	for _, st := range res.Statuses {
		if st.Rule == nil || st.Rule.Unlimited {
			continue
		}
		if s.quota(st.Rule) {
			pools++
			if st.OverLimit {
				spent++
			}
			continue
		}
		if st.OverLimit {
			return true
		}
	}
	return pools > 0 && spent == pools
}

// useOne decides a descriptor's own usage: a charge of its cost, over when
// it did not fit; a check (cost 0), over when the count has passed the
// limit.
func useOne(ctx context.Context, c check) (ratelimit.Decision, bool, error) {
	switch {
	case c.limiter == nil: // a rule of 0 requests: any use is over
		d, err := denied(ctx, c)
		return d, true, err
	case c.cost == 0:
		d, err := c.limiter.Peek(ctx, c.key)
		return d, d.Count > d.Limit, err
	}
	d, err := c.limiter.Charge(ctx, c.key, c.cost)
	return d, !d.Allowed, err
}
