package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

func limiter(t *testing.T, s backend.Store, p ratelimit.Policy, opts ...ratelimit.Option) *ratelimit.Limiter {
	l, err := ratelimit.New(s, p, opts...)
	require.NoError(t, err)
	return l
}

func memoryStore(t *testing.T) backend.Store {
	s, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })

// serve runs the middleware in a real HTTP server.
func serve(t *testing.T, m *httplimit.Middleware) *httptest.Server {
	srv := httptest.NewServer(m.Handler(ok))
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, url string, header ...string) *http.Response {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// policyItem is one item of RateLimit or RateLimit-Policy, parsed.
type policyItem struct {
	name   string
	params map[string]int64
}

// parseList parses a structured-field List of named items with integer
// parameters, as a client would (github.com/dunglas/httpsfv).
func parseList(t *testing.T, resp *http.Response, field string) []policyItem {
	t.Helper()
	list, err := httpsfv.UnmarshalList(resp.Header.Values(field))
	require.NoError(t, err, "%s: %q is a structured field", field, resp.Header.Values(field))
	var out []policyItem
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		require.True(t, ok, "%s: an item, not an inner list", field)
		name, ok := item.Value.(string)
		require.True(t, ok, "%s: the item names the policy with a string", field)
		p := policyItem{name: name, params: map[string]int64{}}
		for _, k := range item.Params.Names() {
			v, _ := item.Params.Get(k)
			n, ok := v.(int64)
			require.True(t, ok, "%s: %s is an integer", field, k)
			p.params[k] = n
		}
		out = append(out, p)
	}
	return out
}

func TestAdmitsThenDeniesWithTheDraftsFields(t *testing.T) {
	l := limiter(t, memoryStore(t), ratelimit.PerMinute(3))
	m, err := httplimit.New([]httplimit.Rule{{Limiter: l, Key: httplimit.RemoteIP()}})
	require.NoError(t, err)
	srv := serve(t, m)
	for i := 1; i <= 3; i++ {
		resp := get(t, srv.URL)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, []policyItem{{"default", map[string]int64{"q": 3, "w": 60}}}, parseList(t, resp, "RateLimit-Policy"))
		require.Equal(t, []policyItem{{"default", map[string]int64{"r": int64(3 - i), "t": 60}}}, parseList(t, resp, "RateLimit"),
			"the oldest request leaves in a minute")
		require.Equal(t, "3", resp.Header.Get("X-RateLimit-Limit"))
		require.Equal(t, strconv.Itoa(3-i), resp.Header.Get("X-RateLimit-Remaining"))
		reset, err := strconv.ParseInt(resp.Header.Get("X-RateLimit-Reset"), 10, 64)
		require.NoError(t, err)
		require.InDelta(t, time.Now().Add(time.Minute).Unix(), reset, 2, "legacy reset is a Unix time")
		require.Empty(t, resp.Header.Get("RateLimit-Limit"), "the early draft's trio is off by default")
	}
	resp := get(t, srv.URL)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	state := parseList(t, resp, "RateLimit")
	require.Len(t, state, 1)
	require.Zero(t, state[0].params["r"])
	retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.True(t, retry >= 59 && retry <= 60, "Retry-After %d: seconds until the oldest request leaves, rounded up", retry)
}

func TestTheOlderHeadersAreOptions(t *testing.T) {
	l := limiter(t, memoryStore(t), ratelimit.PerMinute(3))
	m, err := httplimit.New([]httplimit.Rule{{Limiter: l, Key: httplimit.RemoteIP()}}, httplimit.WithLegacyHeaders(false), httplimit.WithEarlyDraftHeaders(true))
	require.NoError(t, err)
	resp := get(t, serve(t, m).URL)
	require.Equal(t, "3", resp.Header.Get("RateLimit-Limit"))
	require.Equal(t, "2", resp.Header.Get("RateLimit-Remaining"))
	require.Equal(t, "60", resp.Header.Get("RateLimit-Reset"))
	require.Empty(t, resp.Header.Get("X-RateLimit-Remaining"))
	require.Len(t, parseList(t, resp, "RateLimit"), 1, "the current fields are always there")
}

// One item per policy, named by WithName, a name a string cannot hold
// made one; GCRA's quota is its burst.
func TestOneItemPerPolicy(t *testing.T) {
	s := memoryStore(t)
	perIP := limiter(t, s, ratelimit.PerMinute(5), ratelimit.WithName(`per-ip "v4"`), ratelimit.WithPrefix("ip:"))
	burst := limiter(t, s, ratelimit.TokenBucket(10, time.Second, 20), ratelimit.WithPrefix("b:"))
	daily := limiter(t, s, ratelimit.Policy{Limit: 1000, Window: 24 * time.Hour, Algorithm: ratelimit.FixedWindow}, ratelimit.WithName("daily·quota"), ratelimit.WithPrefix("d:"))
	m, err := httplimit.New([]httplimit.Rule{
		{Limiter: perIP, Key: httplimit.RemoteIP()}, {Limiter: burst, Key: httplimit.RemoteIP()}, {Limiter: daily, Key: httplimit.RemoteIP()},
	})
	require.NoError(t, err)
	resp := get(t, serve(t, m).URL)
	require.Equal(t, []policyItem{
		{`per-ip "v4"`, map[string]int64{"q": 5, "w": 60}},
		{"policy2", map[string]int64{"q": 20, "w": 1}},
		{"daily_quota", map[string]int64{"q": 1000, "w": 86400}},
	}, parseList(t, resp, "RateLimit-Policy"))
	state := parseList(t, resp, "RateLimit")
	require.Len(t, state, 3)
	require.Equal(t, int64(4), state[0].params["r"])
	require.Equal(t, int64(19), state[1].params["r"])
	require.Equal(t, int64(999), state[2].params["r"])
}

func TestSeveralRulesAndACustomDenial(t *testing.T) {
	s := memoryStore(t)
	perToken := limiter(t, s, ratelimit.PerMinute(2), ratelimit.WithName("per-token"), ratelimit.WithPrefix("token:"))
	perIP := limiter(t, s, ratelimit.PerMinute(5), ratelimit.WithName("per-ip"), ratelimit.WithPrefix("ip:"))
	m, err := httplimit.New([]httplimit.Rule{
		{Limiter: perIP, Key: httplimit.RemoteIP()},
		{Limiter: perToken, Key: httplimit.Header("X-Api-Token")},
	}, httplimit.WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, d ratelimit.MultiDecision) {
		w.Header().Set("X-Denied-By", d.Name)
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	require.NoError(t, err)
	srv := serve(t, m)

	require.Equal(t, http.StatusOK, get(t, srv.URL, "X-Api-Token", "t1").StatusCode)
	resp := get(t, srv.URL, "X-Api-Token", "t1")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "0", resp.Header.Get("X-RateLimit-Remaining"), "the strictest rule's quota: the token's")
	resp = get(t, srv.URL, "X-Api-Token", "t1")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "per-token", resp.Header.Get("X-Denied-By"))
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.Equal(t, http.StatusOK, get(t, srv.URL, "X-Api-Token", "t2").StatusCode, "another token")
	d, err := perIP.Peek(context.Background(), "127.0.0.1")
	require.NoError(t, err)
	require.Equal(t, 3, d.Count, "the denied request took nothing from the IP's quota")

	require.Equal(t, http.StatusBadRequest, get(t, srv.URL).StatusCode, "no token: no key")
	long := strings.Repeat("t", ratelimit.MaxKeyLen+1)
	require.Equal(t, http.StatusBadRequest, get(t, srv.URL, "X-Api-Token", long).StatusCode, "a token too long to be a key is the client's fault")
}

func TestRemoteIPTrustsOnlyConfiguredProxies(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	for _, tc := range []struct {
		name, remote, xff string
		trusted           []netip.Prefix
		want              string
	}{
		{"no proxies: the peer, header ignored", "203.0.113.7:5000", "198.51.100.1", nil, "203.0.113.7"},
		{"an untrusted peer cannot spoof", "203.0.113.7:5000", "198.51.100.1", proxies, "203.0.113.7"},
		{"behind a trusted proxy: the client it saw", "10.1.2.3:80", "198.51.100.1", proxies, "198.51.100.1"},
		{"two trusted proxies", "10.1.2.3:80", "198.51.100.1, 10.9.9.9", proxies, "198.51.100.1"},
		{"a spoofed left entry is not trusted", "10.1.2.3:80", "1.1.1.1, 198.51.100.1", proxies, "198.51.100.1"},
		{"IPv6 peer: its /64", "[::1]:80", "2001:db8::5", proxies, "2001:db8::/64"},
		{"IPv4-mapped IPv6", "[::ffff:203.0.113.9]:80", "", proxies, "203.0.113.9"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tc.remote
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		key, err := httplimit.ClientIP(httplimit.TrustProxies(tc.trusted...))
		require.NoError(t, err, tc.name)
		got, err := key(r)
		require.NoError(t, err, tc.name)
		if len(tc.trusted) == 0 {
			got2, err := httplimit.RemoteIP()(r)
			require.NoError(t, err, tc.name)
			require.Equal(t, got, got2, "RemoteIP is ClientIP with no proxy")
		}
		require.Equal(t, tc.want, got, tc.name)
	}
}

// Proxies write hops in several forms; a hop that is no address once made
// the request keyed by the trusted proxy's own address (every client behind
// an IIS/ARR or Azure Application Gateway proxy, which write ip:port, shared
// one bucket): it is now ErrNoKey.
func TestClientIPReadsHopsAsProxiesWriteThem(t *testing.T) {
	trusted := httplimit.TrustProxies(netip.MustParsePrefix("10.0.0.0/8"))
	key, err := httplimit.ClientIP(trusted)
	require.NoError(t, err)
	forwarded, err := httplimit.ClientIP(trusted, httplimit.UseForwarded())
	require.NoError(t, err)
	for _, tc := range []struct {
		name, header, value string
		key                 httplimit.KeyFunc
		want                string // "" for ErrNoKey
	}{
		{"ip:port (IIS, ARR, Azure Application Gateway)", "X-Forwarded-For", "198.51.100.1:52311", key, "198.51.100.1"},
		{"[v6]", "X-Forwarded-For", "[2001:db8:1:2::5]", key, "2001:db8:1:2::/64"},
		{"[v6]:port", "X-Forwarded-For", "[2001:db8:1:2::5]:443", key, "2001:db8:1:2::/64"},
		{"bare v6", "X-Forwarded-For", "2001:db8:1:2::5", key, "2001:db8:1:2::/64"},
		{"a proxy's 'unknown': no key, not the proxy's", "X-Forwarded-For", "unknown", key, ""},
		{"garbage behind a trusted hop", "X-Forwarded-For", "not-an-ip, 10.0.0.9", key, ""},
		{"garbage left of the client does not matter", "X-Forwarded-For", "not-an-ip, 198.51.100.1", key, "198.51.100.1"},
		{"Forwarded, RFC 7239", "Forwarded", `for=192.0.2.60;proto=http;by=203.0.113.43`, forwarded, "192.0.2.60"},
		{"Forwarded, quoted [v6]:port", "Forwarded", `for="[2001:db8:cafe::17]:4711"`, forwarded, "2001:db8:cafe::/64"},
		{"Forwarded, several elements", "Forwarded", `for=198.51.100.1, for=10.0.0.9;proto=https`, forwarded, "198.51.100.1"},
		{"Forwarded, obfuscated", "Forwarded", `for=_hidden`, forwarded, ""},
		{"Forwarded is not read without the option", "Forwarded", `for=192.0.2.60`, key, "10.1.2.3"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.1.2.3:80"
		r.Header.Set(tc.header, tc.value)
		got, err := tc.key(r)
		if tc.want == "" {
			require.ErrorIs(t, err, httplimit.ErrNoKey, tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, got, tc.name)
	}
}

// IPv6 clients are grouped by prefix, /64 by default: the addresses of one
// /64 share a bucket, so rotating through them gains nothing.
func TestClientIPGroupsIPv6ByPrefix(t *testing.T) {
	key := func(opts ...httplimit.IPOption) httplimit.KeyFunc {
		f, err := httplimit.ClientIP(opts...)
		require.NoError(t, err)
		return f
	}
	at := func(f httplimit.KeyFunc, remote string) string {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		k, err := f(r)
		require.NoError(t, err)
		return k
	}
	def := key()
	require.Equal(t, at(def, "[2001:db8:1:2::1]:80"), at(def, "[2001:db8:1:2:ffff:ffff:ffff:ffff]:80"), "one /64, one key")
	require.NotEqual(t, at(def, "[2001:db8:1:2::1]:80"), at(def, "[2001:db8:1:3::1]:80"), "another /64")
	require.Equal(t, "2001:db8:1::/48", at(key(httplimit.IPv6Prefix(48)), "[2001:db8:1:2::1]:80"))
	require.Equal(t, "2001:db8:1:2::1", at(key(httplimit.IPv6Prefix(128)), "[2001:db8:1:2::1]:80"))
	require.Equal(t, "203.0.113.7", at(def, "203.0.113.7:80"), "IPv4 keeps /32")
	require.Equal(t, "203.0.113.0/24", at(key(httplimit.IPv4Prefix(24)), "203.0.113.7:80"))
	require.Equal(t, "203.0.113.9", at(def, "[::ffff:203.0.113.9]:80"), "IPv4-mapped IPv6 is IPv4")
	for _, bad := range []httplimit.IPOption{httplimit.IPv6Prefix(0), httplimit.IPv6Prefix(129), httplimit.IPv4Prefix(33), httplimit.IPv4Prefix(-1),
		httplimit.TrustProxies(netip.Prefix{})} { // a zero prefix once trusted nothing, silently
		_, err := httplimit.ClientIP(bad)
		require.ErrorIs(t, err, ratelimit.ErrInvalidArgument)
	}
}

type userKey struct{}

func TestKeyFromContext(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	_, err := httplimit.FromContext(userKey{})(r)
	require.True(t, errors.Is(err, httplimit.ErrNoKey))
	r = r.WithContext(context.WithValue(r.Context(), userKey{}, "alice"))
	got, err := httplimit.FromContext(userKey{})(r)
	require.NoError(t, err)
	require.Equal(t, "alice", got)
}

// The default 400 once wrote the whole error back: a forwarded hop of 1 MB
// made a body of 1 MB (2 MB of escapes for 1 MB of quotes), naming the
// trusted proxy. It is now a short fixed message.
func TestTheDefault400SaysLittle(t *testing.T) {
	key, err := httplimit.ClientIP(httplimit.TrustProxies(netip.MustParsePrefix("10.0.0.0/8")))
	require.NoError(t, err)
	m, err := httplimit.New([]httplimit.Rule{{Limiter: limiter(t, memoryStore(t), ratelimit.PerMinute(5)), Key: key}})
	require.NoError(t, err)
	for _, hop := range []string{strings.Repeat("x", 1<<20), strings.Repeat(`"`, 1<<20)} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.0.0.5:4000"
		r.Header.Set("X-Forwarded-For", hop)
		w := httptest.NewRecorder()
		m.Handler(ok).ServeHTTP(w, r)
		require.Equal(t, http.StatusBadRequest, w.Code)
		require.Less(t, w.Body.Len(), 1024, "the body is short")
		require.NotContains(t, w.Body.String(), "10.0.0.5", "it names no address")
		require.NotContains(t, w.Body.String(), "xxxx", "nor the client's bytes")
	}
}

// On a 429 decided together (one TakeAll), every policy's item was sent: a
// per-hour item with t=3599 stood beside Retry-After: 1. Draft -11 wants
// the retry consistent with the items: only the denying policies' are sent.
func TestA429CarriesTheDenyingPoliciesItems(t *testing.T) {
	s := memoryStore(t)
	perSecond := limiter(t, s, ratelimit.PerSecond(1), ratelimit.WithName("per-second"), ratelimit.WithPrefix("s:"))
	perHour := limiter(t, s, ratelimit.PerHour(1000), ratelimit.WithName("per-hour"), ratelimit.WithPrefix("h:"))
	m, err := httplimit.New([]httplimit.Rule{{Limiter: perSecond, Key: httplimit.RemoteIP()}, {Limiter: perHour, Key: httplimit.RemoteIP()}})
	require.NoError(t, err)
	srv := serve(t, m)
	resp := get(t, srv.URL)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, parseList(t, resp, "RateLimit"), 2, "an admission reports every policy")
	resp = get(t, srv.URL)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	state := parseList(t, resp, "RateLimit")
	require.Len(t, state, 1, "only the denying policy")
	require.Equal(t, "per-second", state[0].name)
	retry, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
	require.NoError(t, err)
	require.Equal(t, retry, state[0].params["t"], "its t is the Retry-After")
	require.Len(t, parseList(t, resp, "RateLimit-Policy"), 2, "the policies are all described")
}

// A key over its limit (the limit lowered under it) is denied until enough
// of its requests have left, after its count first drops: the 429's t is
// still its Retry-After (it was the next drop: 45 s beside Retry-After:
// 50), and the other fields of the reset say the same.
func TestA429OverTheLimitAgreesWithRetryAfter(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := limiter(t, memoryStore(t), ratelimit.PerMinute(10), ratelimit.WithName("per-minute"),
		ratelimit.WithCallerClock(func() time.Time { return now }))
	m, err := httplimit.New([]httplimit.Rule{{Limiter: l, Key: httplimit.RemoteIP()}}, httplimit.WithEarlyDraftHeaders(true))
	require.NoError(t, err)
	srv := serve(t, m)
	for i := 0; i < 10; i++ {
		require.Equal(t, http.StatusOK, get(t, srv.URL).StatusCode)
		now = now.Add(time.Second)
	}
	require.NoError(t, l.SetPolicy(ratelimit.PerMinute(5)))
	resp := get(t, srv.URL)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	retry, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
	require.NoError(t, err)
	require.EqualValues(t, 55, retry, "the sixth oldest, of 5 s ago, leaves in 55 s")
	require.Equal(t, retry, parseList(t, resp, "RateLimit")[0].params["t"], "RateLimit's t")
	require.Equal(t, strconv.FormatInt(retry, 10), resp.Header.Get("RateLimit-Reset"))
	require.Equal(t, strconv.FormatInt(now.Unix()+retry, 10), resp.Header.Get("X-RateLimit-Reset"))
}
