// Package httplimit puts ratelimit policies in front of net/http handlers.
//
// A Middleware holds one or more Rules, each a Limiter and the KeyFunc that
// picks the request's key for it (its remote IP, a header, the user in the
// context). A request passes only if every rule admits it (see
// ratelimit.Multi); otherwise it gets 429 Too Many Requests with Retry-After.
// Every response carries the strictest policy's quota:
//
//	RateLimit-Limit: 100
//	RateLimit-Remaining: 42
//	RateLimit-Reset: 17          (seconds until quota frees up)
//
// and, unless switched off, the legacy trio X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset (a Unix time in seconds).
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
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// ErrNoKey: a KeyFunc found nothing to limit the request by (no such
// header, no user in the context...). By default such a request gets 400.
var ErrNoKey = errors.New("httplimit: no key for the request")

// KeyFunc picks the key a Rule limits a request by.
type KeyFunc func(r *http.Request) (string, error)

// Rule limits requests by Limiter, keyed by Key.
type Rule struct {
	Limiter *ratelimit.Limiter
	Key     KeyFunc
}

// Middleware applies Rules to requests. Create it with New.
type Middleware struct {
	rules   []Rule
	multi   *ratelimit.Multi
	legacy  bool
	denied  func(w http.ResponseWriter, r *http.Request, d ratelimit.MultiDecision)
	onError func(w http.ResponseWriter, r *http.Request, err error)
}

// Option configures a Middleware.
type Option func(*Middleware)

// WithLegacyHeaders switches the X-RateLimit-* headers on (the default) or
// off.
func WithLegacyHeaders(on bool) Option { return func(m *Middleware) { m.legacy = on } }

// WithDeniedHandler replaces the 429 response. The quota headers and
// Retry-After are already set when it runs; it writes the status and body.
// d.Name tells which rule's Limiter denied.
func WithDeniedHandler(h func(w http.ResponseWriter, r *http.Request, d ratelimit.MultiDecision)) Option {
	return func(m *Middleware) { m.denied = h }
}

// WithErrorHandler replaces the response to a request that cannot be decided:
// a KeyFunc error or a key the Limiter rejects, e.g. over
// ratelimit.MaxKeyLen (default 400), or a store error under a Limiter that
// fails closed (default 503; check errors.Is(err, ratelimit.ErrStore)). A
// Limiter that fails open answers instead of failing, so the handler does not
// run: its observer sees the store's error.
func WithErrorHandler(h func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return func(m *Middleware) { m.onError = h }
}

// New returns a Middleware applying rules, in order, to every request.
func New(rules []Rule, opts ...Option) (*Middleware, error) {
	limiters := make([]*ratelimit.Limiter, len(rules))
	for i, r := range rules {
		if r.Limiter == nil || r.Key == nil {
			return nil, fmt.Errorf("%w: rule %d has no limiter or no key function", ratelimit.ErrInvalidArgument, i)
		}
		limiters[i] = r.Limiter
	}
	multi, err := ratelimit.NewMulti(limiters...)
	if err != nil {
		return nil, err
	}
	m := &Middleware{rules: rules, multi: multi, legacy: true, denied: tooManyRequests, onError: failed}
	for _, o := range opts {
		o(m)
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
		d, err := m.multi.Allow(r.Context(), keys...)
		if err != nil { // failed closed, or bad input
			m.onError(w, r, err)
			return
		}
		if d.Source == ratelimit.SourceFailOpen { // an admission with no quota to tell
			next.ServeHTTP(w, r)
			return
		}
		m.setHeaders(w.Header(), d.Decision)
		if !d.Allowed {
			w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(d.RetryAfter, 1), 10))
			m.denied(w, r, d)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (m *Middleware) setHeaders(h http.Header, d ratelimit.Decision) {
	limit, remaining := strconv.Itoa(d.Limit), strconv.Itoa(d.Remaining)
	h.Set("RateLimit-Limit", limit)
	h.Set("RateLimit-Remaining", remaining)
	h.Set("RateLimit-Reset", strconv.FormatInt(ceilSeconds(d.ResetAt.Sub(d.At), 0), 10))
	if m.legacy {
		h.Set("X-RateLimit-Limit", limit)
		h.Set("X-RateLimit-Remaining", remaining)
		h.Set("X-RateLimit-Reset", strconv.FormatInt(int64(math.Ceil(float64(d.ResetAt.UnixMilli())/1000)), 10))
	}
}

// ceilSeconds is d in whole seconds, rounded up, at least least.
func ceilSeconds(d time.Duration, least int64) int64 {
	return max(least, int64(math.Ceil(d.Seconds())))
}

func tooManyRequests(w http.ResponseWriter, _ *http.Request, _ ratelimit.MultiDecision) {
	http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
}

// failed answers a request that could not be decided.
func failed(w http.ResponseWriter, _ *http.Request, err error) {
	switch {
	case errors.Is(err, ErrNoKey), errors.Is(err, ratelimit.ErrInvalidKey):
		http.Error(w, "rate limit: "+err.Error(), http.StatusBadRequest)
	default:
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
	}
}

// RemoteIP keys a request by its client's IP address: the connection's peer,
// or, when the peer is a trusted proxy, the nearest address in
// X-Forwarded-For that is not a trusted proxy (read from the right, since a
// client can write anything on the left). With no trusted proxies the header
// is ignored.
func RemoteIP(trustedProxies ...netip.Prefix) KeyFunc {
	trusted := func(a netip.Addr) bool {
		for _, p := range trustedProxies {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) (string, error) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		peer, err := netip.ParseAddr(host)
		if err != nil {
			return "", fmt.Errorf("%w: remote address %q", ErrNoKey, r.RemoteAddr)
		}
		client := peer.Unmap()
		if !trusted(client) {
			return client.String(), nil
		}
		hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				break // a malformed hop: trust nothing to its left
			}
			client = hop.Unmap()
			if !trusted(client) {
				break
			}
		}
		return client.String(), nil
	}
}

// Header keys a request by the value of a header (an API token, a tenant
// id); a request without it gets ErrNoKey.
func Header(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		if v := r.Header.Get(name); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%w: no %s header", ErrNoKey, name)
	}
}

// FromContext keys a request by a value an earlier middleware put in its
// context (the authenticated user): a string or a fmt.Stringer; anything else
// is ErrNoKey.
func FromContext(key any) KeyFunc {
	return func(r *http.Request) (string, error) {
		switch v := r.Context().Value(key).(type) {
		case string:
			return v, nil
		case fmt.Stringer:
			return v.String(), nil
		}
		return "", fmt.Errorf("%w: no %v in the context", ErrNoKey, key)
	}
}
