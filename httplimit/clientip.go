package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/ratelimit-go/ratelimit"
)

// RemoteIP keys a request by its connection's peer address, for a server
// that clients reach directly: ClientIP with no trusted proxy and the
// default prefixes (IPv6 by /64), which cannot be misconfigured. Behind a
// proxy, use ClientIP(TrustProxies(...)).
func RemoteIP() KeyFunc {
	f, err := ClientIP()
	if err != nil { // unreachable: the defaults are valid
		return func(*http.Request) (string, error) { return "", err }
	}
	return f
}

// IPOption configures ClientIP.
type IPOption func(*ipConfig)

type ipConfig struct {
	trusted   []netip.Prefix
	v4, v6    int
	forwarded bool
	badPrefix error
}

// TrustProxies names the proxies whose forwarding headers are believed: the
// client is the nearest address, read from the right, that is not one of
// them. With none, the headers are ignored (a client can write anything).
// A prefix that is not valid (the zero Prefix) is an error wrapping
// ratelimit.ErrInvalidArgument.
func TrustProxies(prefixes ...netip.Prefix) IPOption {
	return func(c *ipConfig) {
		for _, p := range prefixes {
			if !p.IsValid() {
				c.badPrefix = fmt.Errorf("%w: trusted proxy prefix %v is not valid", ratelimit.ErrInvalidArgument, p)
			}
		}
		c.trusted = append(c.trusted, prefixes...)
	}
}

// IPv6Prefix groups IPv6 clients by their first bits bits (default 64): one
// key per /64, the block a home or a server usually gets, since anyone
// holding one has 2^64 addresses to rotate through. 128 keys each address.
func IPv6Prefix(bits int) IPOption { return func(c *ipConfig) { c.v6 = bits } }

// IPv4Prefix groups IPv4 clients by their first bits bits (default 32: one
// key per address).
func IPv4Prefix(bits int) IPOption { return func(c *ipConfig) { c.v4 = bits } }

// UseForwarded reads the standard Forwarded header (RFC 7239, its for=
// parameters) instead of X-Forwarded-For.
func UseForwarded() IPOption { return func(c *ipConfig) { c.forwarded = true } }

// ClientIP keys a request by its client's address: the connection's peer,
// or, when the peer is a trusted proxy (TrustProxies), the nearest address
// in X-Forwarded-For (or Forwarded, UseForwarded) that is not a trusted
// proxy, read from the right. Hops may be written as proxies write them: an
// address, address:port, [IPv6] or [IPv6]:port. A hop that still does not
// parse (a proxy's "unknown" or an obfuscated name) ends the search with an
// error wrapping ErrNoKey (400 by default): the request is not keyed by the
// proxy's own address, which would put every client behind it in one
// bucket. An IPv4-mapped IPv6 address is IPv4. IPv6 addresses are grouped
// by prefix (IPv6Prefix, default /64) and the key is the prefix
// ("2001:db8:1:2::/64"); an IPv4 address is its own key unless IPv4Prefix
// says otherwise. A prefix length out of range, or a trusted prefix that is
// not valid, is an error wrapping ratelimit.ErrInvalidArgument.
func ClientIP(opts ...IPOption) (KeyFunc, error) {
	c := ipConfig{v4: 32, v6: 64}
	for _, o := range opts {
		o(&c)
	}
	if c.badPrefix != nil {
		return nil, fmt.Errorf("ratelimit/httplimit: %w", c.badPrefix)
	}
	if c.v4 < 1 || c.v4 > 32 || c.v6 < 1 || c.v6 > 128 {
		return nil, fmt.Errorf("%w: IPv4 prefix /%d, IPv6 prefix /%d: want 1-32 and 1-128", ratelimit.ErrInvalidArgument, c.v4, c.v6)
	}
	trusted := func(a netip.Addr) bool {
		for _, p := range c.trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) (string, error) {
		peer, ok := parseHop(r.RemoteAddr)
		if !ok {
			return "", fmt.Errorf("%w: remote address %q", ErrNoKey, r.RemoteAddr)
		}
		client := peer
		if trusted(client) {
			hops := forwardedFor(r.Header.Values("X-Forwarded-For"))
			if c.forwarded {
				hops = forwardedRFC7239(r.Header.Values("Forwarded"))
			}
			for i := len(hops) - 1; i >= 0; i-- {
				hop, ok := parseHop(hops[i])
				if !ok {
					return "", fmt.Errorf("%w: a forwarded hop %q that is no address, behind trusted proxy %v", ErrNoKey, hops[i], client)
				}
				client = hop
				if !trusted(client) {
					break
				}
			}
		}
		return c.key(client), nil
	}, nil
}

// key is the key of a client's address: its prefix.
func (c ipConfig) key(a netip.Addr) string {
	bits := c.v6
	if a.Is4() {
		bits = c.v4
	}
	if bits == a.BitLen() {
		return a.String()
	}
	p, _ := a.Prefix(bits) // in range: checked by ClientIP
	return p.String()
}

// parseHop reads an address as proxies write it: 1.2.3.4, 1.2.3.4:80,
// 2001:db8::1, [2001:db8::1] or [2001:db8::1]:80; IPv4-mapped IPv6 is IPv4.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), a.Zone() == ""
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), ap.Addr().Zone() == ""
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() {
			return a.Unmap(), a.Zone() == ""
		}
	}
	return netip.Addr{}, false
}

// forwardedFor is the hops of X-Forwarded-For headers, left to right.
func forwardedFor(values []string) []string {
	var hops []string
	for _, v := range values {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				hops = append(hops, h)
			}
		}
	}
	return hops
}

// forwardedRFC7239 is the for= values of Forwarded headers (RFC 7239), left
// to right, unquoted; an element without for= is a hop of "" (no address).
func forwardedRFC7239(values []string) []string {
	var hops []string
	for _, v := range values {
		for _, element := range strings.Split(v, ",") {
			hop := ""
			for _, pair := range strings.Split(element, ";") {
				k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if ok && strings.EqualFold(strings.TrimSpace(k), "for") {
					hop = strings.Trim(strings.TrimSpace(val), `"`)
				}
			}
			if strings.TrimSpace(element) != "" {
				hops = append(hops, hop)
			}
		}
	}
	return hops
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
