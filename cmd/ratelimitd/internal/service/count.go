package service

import (
	"context"
	"fmt"
	"sync"

	"github.com/ratelimit-go/ratelimit"
)

// maxTogether is the most charges of one request useAll sends at once: a
// client chooses how many descriptors it sends, and each is a goroutine.
// Envoy's requests name a few.
const maxTogether = 8

// distinctKeys reports whether no two of checks name one key: their
// charges are then independent, and their order does not matter.
func distinctKeys(checks []check) bool {
	for i := range checks {
		for j := i + 1; j < len(checks); j++ {
			if checks[i].key == checks[j].key {
				return false
			}
		}
	}
	return true
}

// chargeable reports whether checks may be charged in one call of the
// store (chargeAll): each with a limit of its own (not a rule of 0), all
// at one cost above 0 (a check of 0 peeks), no limit asked twice for one
// key (together: in linear time, for a client's many descriptors). Two
// limits on one state the store cannot charge together: the Multi then
// charges them in order, as a key named twice is.
func chargeable(checks []check) bool {
	for _, c := range checks {
		if c.limiter == nil || c.cost <= 0 {
			return false
		}
	}
	return together(checks)
}

// chargeAll is use for each of checks (chargeable) in one call: a Multi's
// ChargeN, which a store that charges several requests together makes one
// round trip (backend.Store's ChargeAll: one script on a server, where
// useAll sent one each). A store that cannot charges them one by one.
func chargeAll(ctx context.Context, checks []check, res *Result) error {
	m, keys, err := multiOf(checks)
	if err != nil {
		return err
	}
	md, err := m.ChargeN(ctx, keys, checks[0].cost)
	if err != nil {
		return err
	}
	for i, c := range checks {
		recordUse(res, c, md.Decisions[i], !md.Decisions[i].Allowed)
	}
	return nil
}

// useAll is use for each of checks, whose keys are distinct, at once: their
// calls are in flight together, and on a client that pipelines concurrent
// callers (valkey-go, go-redis's auto-pipeliner) they share a round trip,
// where one after another took one each: -count-over-limit with three
// descriptors served 0.75x envoyproxy/ratelimit's rate (docs/figures.md).
// The statuses are recorded in order once all are back, and the first
// error in order is returned, as use's loop would.
func useAll(ctx context.Context, checks []check, res *Result) error {
	type used struct {
		d    ratelimit.Decision
		over bool
		err  error
	}
	all := make([]used, len(checks))
	var wg sync.WaitGroup
	for i := 1; i < len(checks); i++ {
		c := checks[i] // a copy: checks may be the caller's stack
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil { // no panic ends the process from here
					all[i].err = fmt.Errorf("charging %q: panic: %v", c.key, r)
				}
			}()
			all[i].d, all[i].over, all[i].err = useOne(ctx, c)
		}()
	}
	all[0].d, all[0].over, all[0].err = useOne(ctx, checks[0])
	wg.Wait()
	for i, c := range checks {
		if all[i].err != nil {
			return all[i].err
		}
		recordUse(res, c, all[i].d, all[i].over)
	}
	return nil
}
