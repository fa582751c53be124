package conformance

import (
	"slices"

	"github.com/ratelimit-go/ratelimit"
)

// OverAdmissions counts where a store admitted more than p allows, given the
// times of one key's admissions (µs, any order; one entry per unit of cost)
// under p held steady. A correct store gives 0. It sorts times. What p allows
// depends on its algorithm:
//   - SlidingWindow: at most Limit in any interval of one window, counted
//     once per first request of such an interval;
//   - FixedWindow: at most Limit in any aligned window, counted per window;
//   - SlidingWindowCounter: at most Limit in any aligned window, and at most
//     Limit + floor(p*e/Window) in the window ending at each admission, where
//     e is how far that admission is into its aligned window and p the
//     count of the aligned window before (the bound stated on
//     ratelimit.SlidingWindowCounter), counted per admission;
//   - GCRA: at most Burst + t*Limit/Window in any interval of length t,
//     counted per pair of admissions that bound too many.
func OverAdmissions(times []int64, p ratelimit.Policy) int {
	slices.Sort(times)
	limit, window := int64(p.Limit), p.Window.Microseconds()
	over := 0
	switch p.Algorithm {
	case ratelimit.FixedWindow:
		return overFixed(times, limit, window)
	case ratelimit.SlidingWindowCounter:
		over = overFixed(times, limit, window)
		perWindow := map[int64]int64{}
		for _, t := range times {
			perWindow[alignedStart(t, window)]++
		}
		for j, t := range times {
			start := alignedStart(t, window)
			prev, e := perWindow[start-window], t-start
			first, _ := slices.BinarySearch(times, t-window+1) // the interval (t-window, t]
			if in := int64(j + 1 - first); in > limit+prev*e/window {
				over++
			}
		}
	case ratelimit.GCRA:
		burst := int64(p.Burst)
		for i := range times {
			for j := i; j < len(times); j++ {
				// j-i+1 admissions in [times[i], times[j]]: at most burst + t*limit/window.
				if (int64(j-i+1)-burst)*window > (times[j]-times[i])*limit {
					over++
				}
			}
		}
	default:
		// limit+1 requests fit in one window (t-window, t] iff the first and
		// the last of them are less than a window apart.
		for i := 0; i+p.Limit < len(times); i++ {
			if times[i+p.Limit]-times[i] < window {
				over++
			}
		}
	}
	return over
}

// overFixed counts the aligned windows holding more than limit.
func overFixed(times []int64, limit, window int64) int {
	over := 0
	for i := 0; i < len(times); {
		start, n := alignedStart(times[i], window), int64(0)
		for ; i < len(times) && alignedStart(times[i], window) == start; i++ {
			n++
		}
		if n > limit {
			over++
		}
	}
	return over
}
