package service

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// Header is one response header for the proxy to add.
type Header struct{ Name, Value string }

// Headers are the IETF draft's RateLimit-Policy and RateLimit fields for the
// enforced limits of res (as httplimit writes them: one item per limit,
// named by the rule's name or full key), and Retry-After when over the
// limit. Shadow limits stay out of them: clients never hear of a limit that
// is not enforced. No limited descriptor, no headers.
func Headers(res Result) []Header {
	var md ratelimit.MultiDecision
	var names []string
	for _, st := range res.Statuses {
		if st.Rule == nil || st.Rule.Unlimited || st.Rule.Shadow {
			continue
		}
		p := st.Rule.Policy
		if st.Rule.DeniesAll() {
			p = ratelimit.Policy{Window: st.Rule.Window}
		}
		names = append(names, st.Name)
		md.Decisions = append(md.Decisions, st.Decision)
		md.Policies = append(md.Policies, p)
	}
	if len(names) == 0 {
		return nil
	}
	md.Allowed = !res.OverLimit
	h := http.Header{}
	httplimit.SetHeaders(h, names, md)
	out := []Header{{"RateLimit-Policy", h.Get("RateLimit-Policy")}, {"RateLimit", h.Get("RateLimit")}}
	if res.OverLimit {
		out = append(out, Header{"Retry-After", strconv.FormatInt(retryAfter(res), 10)})
	}
	return out
}

// retryAfter is, in whole seconds (at least 1), how long until every
// denying limit would admit the request: its longest RetryAfter, or for a
// rule that admits nothing, until its window resets.
func retryAfter(res Result) int64 {
	var longest time.Duration
	for _, st := range res.Statuses {
		if !st.OverLimit {
			continue
		}
		d := st.Decision.RetryAfter
		if d == 0 {
			d = st.Decision.ResetAt.Sub(st.Decision.At)
		}
		longest = max(longest, d)
	}
	return max(1, int64(math.Ceil(longest.Seconds())))
}
