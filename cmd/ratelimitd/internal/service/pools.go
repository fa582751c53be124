package service

import (
	"context"
	"fmt"
)

// pools decides the quota pools a request matched (quota_mode), each on its
// own: a pool that admits the request takes its cost, a spent one records
// nothing. When the enforced limits denied the request, the pools are only
// peeked (a denial consumes nothing); when every pool denies, undo gives
// back what the enforced limits' admission took, so that a request over its
// pools consumes nothing either.
func (s *Service) pools(ctx context.Context, pools []check, undo func(context.Context) error, res *Result) error {
	if len(pools) == 0 {
		return nil
	}
	for _, st := range res.Statuses {
		if st.OverLimit && st.Rule != nil && !s.quota(st.Rule) {
			return peekEach(ctx, pools, res)
		}
	}
	open := false
	for _, c := range pools {
		d, err := takeOne(ctx, c)
		if err != nil {
			return err
		}
		setDecision(res, c, d)
		open = open || d.Allowed
	}
	if open || undo == nil {
		return nil
	}
	if err := undo(ctx); err != nil {
		return fmt.Errorf("every quota pool is spent; giving back the other limits' admission: %w", err)
	}
	return nil
}
