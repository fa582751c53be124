package conformance

import (
	"slices"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/algorithm"
)

// OverAdmissions counts the windows in which more than limit requests of one
// key were admitted, given their times (µs, any order; one entry per unit of
// cost): for a sliding window every interval of length window, counted once
// per first request of such an interval; for a fixed window every aligned
// window. A correct store gives 0. It sorts times.
func OverAdmissions(times []int64, limit int, window int64, alg ratelimit.Algorithm) int {
	slices.Sort(times)
	over := 0
	if alg == ratelimit.FixedWindow {
		for i := 0; i < len(times); {
			start, n := algorithm.WindowStart(times[i], window), 0
			for ; i < len(times) && algorithm.WindowStart(times[i], window) == start; i++ {
				n++
			}
			if n > limit {
				over++
			}
		}
		return over
	}
	// limit+1 requests fit in one window (t-window, t] iff the first and
	// the last of them are less than a window apart.
	for i := 0; i+limit < len(times); i++ {
		if times[i+limit]-times[i] < window {
			over++
		}
	}
	return over
}
