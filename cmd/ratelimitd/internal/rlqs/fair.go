// Package rlqs is ratelimitd's side of Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3): data planes enforce assignments
// locally and report their usage, and the server splits each rule's limit
// between them by their demand. This file and allocator.go are the split:
// max-min fair shares of a limit, handed out so that what every plane may
// be enforcing never sums past the limit.
package rlqs

import "slices"

// FairShares splits limit between demands max-min fairly (water-filling):
// a demand under the level every larger demand is held to gets all it
// asks, the rest share what is left equally, and what no demand asks for
// (the demands summing under limit) is spread equally over them all, as
// room to grow into. Shares are whole requests: they sum to limit exactly
// when there is any demand, each within 1 of its fair real value (the
// units rounding leaves go to the larger demands, the last served). An
// empty demands gets nil.
func FairShares(limit int64, demands []int64) []int64 {
	n := int64(len(demands))
	if n == 0 {
		return nil
	}
	shares := make([]int64, n)
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	// Smallest demand first: each takes min(its demand, an equal part of
	// what is left), which is the water level once the smaller are served.
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case demands[a] < demands[b]:
			return -1
		case demands[a] > demands[b]:
			return 1
		}
		return 0
	})
	left := limit
	for k, i := range order {
		part := left / (n - int64(k))
		d := max(demands[i], 0)
		if d < part {
			part = d
		}
		shares[i] = part
		left -= part
	}
	// What is left (no demand asked for it, or rounding kept it) goes
	// equally to all, the remainder one unit each to the first.
	each, rest := left/n, left%n
	for i := range shares {
		shares[i] += each
		if int64(i) < rest {
			shares[i]++
		}
	}
	return shares
}
