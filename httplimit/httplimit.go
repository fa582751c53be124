// Package httplimit puts ratelimit policies in front of net/http handlers.
//
// A Middleware holds one or more Rules, each a Limiter and the KeyFunc that
// picks the request's key for it (its remote IP, a header, the user in the
// context). A request passes only if every rule admits it (see
// ratelimit.Multi); otherwise it gets 429 Too Many Requests with Retry-After.
// A request takes 1 from each rule, or what the rule's Cost says; a cost of
// 0 checks the rule without taking. A Usage rule is a budget of what the
// handler reports with ReportUsage (tokens, bytes), charged once the
// handler returns: checked before (or reserved, with a Cost), charged
// after, so that requests in flight pass it by no more than their usage
// (beyond what they reserved). A rule whose Limiter's policy is InFlight
// (ratelimit.Concurrency) holds a permit while the handler runs, taken once
// the other rules admitted the request: when every permit is held, the
// request gets 429 with Retry-After (when the first lease ends, should none
// be renewed), and no RateLimit fields for it.
// Every response carries the two fields of the IETF draft
// (draft-ietf-httpapi-ratelimit-headers-11), structured fields with one item
// per policy, named by the Limiter's WithName ("default" for a single
// unnamed one, "policy2"... for the others):
//
//	RateLimit-Policy: "per-ip";q=100;w=60, "per-token";q=1000;w=3600
//	RateLimit: "per-ip";r=42;t=17, "per-token";r=998;t=3599
//
// q is the quota (the policy's limit; GCRA's burst), w its window in
// seconds, r what remains and t the seconds until quota frees up (a policy a
// denial kept from being asked has no RateLimit item). On a 429, the
// RateLimit items are those of the denying policies only, each t their
// RetryAfter, so that every t agrees with Retry-After, as draft -11 asks (a
// per-hour policy that admitted would otherwise say t=3599 beside
// Retry-After: 1; a key over a lowered limit drops its count before it
// admits, and said when). By default the
// response also carries the strictest policy's quota as the X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset (a Unix time in seconds) that
// many clients still read (WithLegacyHeaders(false) drops them), and, only
// WithEarlyDraftHeaders(true), as the RateLimit-Limit, RateLimit-Remaining
// and RateLimit-Reset of the draft's earlier versions.
//
// When a store fails, the Limiter's failure mode decides: a Limiter that
// fails closed (the default) makes the request fail (503 by default, through
// the Middleware's error handler); one built WithFailOpen lets it through
// without quota headers (its decision's Source is not the store). Either way
// the error reaches the Limiter's observer.
package httplimit

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/frontend"
)

// ErrNoKey: a KeyFunc found nothing to limit the request by (no such
// header, no user in the context...). By default such a request gets 400.
var ErrNoKey = errors.New("ratelimit/httplimit: no key for the request")

// KeyFunc picks the key a Rule limits a request by.
type KeyFunc func(r *http.Request) (string, error)

// Rule limits requests by Limiter, keyed by Key.
type Rule struct {
	Limiter *ratelimit.Limiter
	Key     KeyFunc
	// Cost is what a request takes from the rule before the handler runs
	// (nil: 1, or for a Usage rule 0). A cost of 0 checks the rule without
	// taking from it: the request is denied once its quota is spent. An
	// error is the request's, as a KeyFunc's.
	Cost func(r *http.Request) (int, error)
	// Usage makes the rule a budget of what handlers report with
	// ReportUsage (an LLM's tokens, bytes): once the handler returns, the
	// rule is charged what was reported, less what Cost took before (see
	// ratelimit.Limiter.Settle: the excess is charged, what was not used
	// given back). A request that reports nothing, where Cost took
	// nothing, costs no call after the handler.
	Usage bool
}

// Middleware applies Rules to requests. Create it with New.
type Middleware struct {
	rules   []Rule           // the rates', decided together
	permits []Rule           // the InFlight policies', a permit each held while the handler runs
	names   []string         // the rates' names, as structured-field strings
	multi   *ratelimit.Multi // nil: no rate
	plain   bool             // every rule takes 1 and none is a Usage rule: Multi.Allow
	legacy  bool
	early   bool
	denied  func(w http.ResponseWriter, r *http.Request, d ratelimit.MultiDecision)
	onError func(w http.ResponseWriter, r *http.Request, err error)
}

// Option configures a Middleware.
type Option func(*Middleware)

// WithLegacyHeaders switches the X-RateLimit-* headers on (the default) or
// off.
func WithLegacyHeaders(on bool) Option { return func(m *Middleware) { m.legacy = on } }

// WithEarlyDraftHeaders switches on (default off) the RateLimit-Limit,
// RateLimit-Remaining and RateLimit-Reset headers of the draft's versions
// before RateLimit and RateLimit-Policy replaced them, for clients that
// still read them: the strictest policy's quota.
func WithEarlyDraftHeaders(on bool) Option { return func(m *Middleware) { m.early = on } }

// WithDeniedHandler replaces the 429 response. The quota headers and
// Retry-After are already set when it runs; it writes the status and body.
// d.Name tells which rule's Limiter denied.
func WithDeniedHandler(h func(w http.ResponseWriter, r *http.Request, d ratelimit.MultiDecision)) Option {
	return func(m *Middleware) { m.denied = h }
}

// WithErrorHandler replaces the response to a request that cannot be decided:
// a KeyFunc error or a key the Limiter rejects, e.g. over
// ratelimit.MaxKeyLen, or a Cost over the rule's (default 400), or a store error under a Limiter that
// fails closed (default 503; check errors.Is(err, ratelimit.ErrStore)). A
// Limiter that fails open answers instead of failing, so the handler does not
// run: its observer sees the store's error.
func WithErrorHandler(h func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return func(m *Middleware) { m.onError = h }
}

// New returns a Middleware applying rules, in order, to every request.
func New(rules []Rule, opts ...Option) (*Middleware, error) {
	if len(rules) == 0 {
		return nil, fmt.Errorf("%w: no rules", ratelimit.ErrInvalidArgument)
	}
	m := &Middleware{plain: true, legacy: true, denied: tooManyRequests, onError: failed}
	var limiters []*ratelimit.Limiter
	for i, r := range rules {
		switch {
		case r.Limiter == nil || r.Key == nil:
			return nil, fmt.Errorf("%w: rule %d has no limiter or no key function", ratelimit.ErrInvalidArgument, i)
		case r.Limiter.Policy().Algorithm == ratelimit.InFlight:
			m.permits = append(m.permits, r)
			continue
		}
		m.rules, limiters = append(m.rules, r), append(limiters, r.Limiter)
		m.plain = m.plain && r.Cost == nil && !r.Usage
	}
	if len(limiters) > 0 {
		var err error
		if m.multi, err = ratelimit.NewMulti(limiters...); err != nil {
			return nil, err
		}
	}
	for _, o := range opts {
		o(m)
	}
	for i, l := range limiters {
		name := l.Name()
		switch {
		case name != "":
		case len(limiters) == 1:
			name = "default"
		default:
			name = "policy" + strconv.Itoa(i+1)
		}
		m.names = append(m.names, sfString(name))
	}
	return m, nil
}

// Handler wraps next: it runs only for admitted requests.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys := make([]string, len(m.rules))
		for i, rule := range m.rules {
			k, err := rule.Key(r)
			if err == nil && k == "" {
				err = ErrNoKey
			}
			if err != nil {
				m.onError(w, r, err)
				return
			}
			keys[i] = k
		}
		// Permits first: a request they deny takes nothing from the rates,
		// and one the rates deny gives its permits straight back (a permit
		// denial after the rates' admission once cost the rates' quota).
		if len(m.permits) > 0 {
			held, denial, err := m.acquire(r)
			if err != nil {
				m.onError(w, r, err)
				return
			}
			if denial != nil {
				w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(denial.RetryAfter, 1), 10))
				m.denied(w, r, *denial)
				return
			}
			defer frontend.Release(r.Context(), held)
		}
		d, costs, err := m.decide(r, keys)
		if err != nil { // failed closed, or bad input
			m.onError(w, r, err)
			return
		}
		if m.multi != nil && d.Source != ratelimit.SourceFailOpen { // else no quota to tell
			m.setHeaders(w.Header(), d)
		}
		if !d.Allowed {
			w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(d.RetryAfter, 1), 10))
			m.denied(w, r, d)
			return
		}
		if m.plain {
			next.ServeHTTP(w, r)
			return
		}
		m.serveAndSettle(w, r, next, keys, costs, d)
	})
}

// decide decides the rates' rules for r (keys[i] the i-th's): every one
// takes 1, or their costs.
func (m *Middleware) decide(r *http.Request, keys []string) (ratelimit.MultiDecision, []int, error) {
	switch {
	case m.multi == nil:
		return ratelimit.MultiDecision{Decision: ratelimit.Decision{Allowed: true}}, nil, nil
	case m.plain:
		d, err := m.multi.Allow(r.Context(), keys...)
		return d, nil, err
	}
	costs, err := m.costs(r)
	if err != nil {
		return ratelimit.MultiDecision{}, nil, err
	}
	d, err := m.multi.AllowCosts(r.Context(), keys, costs)
	return d, costs, err
}

func (m *Middleware) setHeaders(h http.Header, md ratelimit.MultiDecision) {
	setStandard(h, m.names, md)
	d := md.Decision
	limit, remaining := strconv.Itoa(d.Limit), strconv.Itoa(d.Remaining)
	if m.early {
		h.Set("RateLimit-Limit", limit)
		h.Set("RateLimit-Remaining", remaining)
		h.Set("RateLimit-Reset", strconv.FormatInt(resetIn(d), 10))
	}
	if m.legacy {
		h.Set("X-RateLimit-Limit", limit)
		h.Set("X-RateLimit-Remaining", remaining)
		reset := d.ResetAt
		if !d.Allowed {
			reset = d.At.Add(d.RetryAfter)
		}
		h.Set("X-RateLimit-Reset", strconv.FormatInt(int64(math.Ceil(float64(reset.UnixMilli())/1000)), 10))
	}
}

// resetIn is the seconds until d's quota resets, as the fields say it: for a
// denial, until the request fits (its Retry-After: a key over its limit
// drops its count sooner, and is still denied); otherwise until the count
// next drops (ResetAt).
func resetIn(d ratelimit.Decision) int64 {
	if !d.Allowed {
		return ceilSeconds(d.RetryAfter, 1)
	}
	return ceilSeconds(d.ResetAt.Sub(d.At), 0)
}

// SetHeaders sets h's RateLimit-Policy and RateLimit fields (the IETF
// draft's, as the package documentation describes) for md, naming the i-th
// policy names[i]: what a service deciding for a proxy (ratelimitd) sends
// for the proxy to add to its response. names must be as long as
// md.Decisions.
func SetHeaders(h http.Header, names []string, md ratelimit.MultiDecision) {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = sfString(n)
	}
	setStandard(h, quoted, md)
}

// setStandard sets the draft's two fields; names are structured-field
// strings already.
func setStandard(h http.Header, names []string, md ratelimit.MultiDecision) {
	var policy, state strings.Builder
	for i, d := range md.Decisions {
		if i > 0 {
			policy.WriteString(", ")
		}
		fmt.Fprintf(&policy, "%s;q=%d;w=%d", names[i], md.Policies[i].MaxCost(), ceilSeconds(md.Policies[i].Window, 1))
		if d.Limit == 0 || (!md.Allowed && d.Allowed) { // not asked (a denial came first), or not what denies
			continue
		}
		if state.Len() > 0 {
			state.WriteString(", ")
		}
		fmt.Fprintf(&state, "%s;r=%d;t=%d", names[i], d.Remaining, resetIn(d))
	}
	h.Set("RateLimit-Policy", policy.String())
	h.Set("RateLimit", state.String())
}

// sfString is s as a structured-field string (RFC 8941): quoted, with '"'
// and '\' escaped; a character a string cannot hold (outside printable
// ASCII) becomes '_'.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r > 0x7e:
			b.WriteByte('_')
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// ceilSeconds is d in whole seconds, rounded up, at least least.
func ceilSeconds(d time.Duration, least int64) int64 {
	return max(least, int64(math.Ceil(d.Seconds())))
}

func tooManyRequests(w http.ResponseWriter, _ *http.Request, _ ratelimit.MultiDecision) {
	http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
}

// failed answers a request that could not be decided, with a short fixed
// body: the error's text may hold the client's own bytes (a forwarded hop
// of a megabyte) or internal addresses (a trusted proxy's, a server's), so
// it is left to a handler of one's own (WithErrorHandler) for logs.
func failed(w http.ResponseWriter, _ *http.Request, err error) {
	switch {
	case errors.Is(err, ErrNoKey):
		http.Error(w, "rate limit: the request carries no client key to limit by", http.StatusBadRequest)
	case errors.Is(err, ratelimit.ErrInvalidKey):
		http.Error(w, "rate limit: the request's key is invalid", http.StatusBadRequest)
	case errors.Is(err, ratelimit.ErrInvalidCost):
		http.Error(w, "rate limit: the request's cost is invalid, or more than a limit ever admits", http.StatusBadRequest)
	default:
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
	}
}
