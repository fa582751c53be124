package service

// RLSOption configures what NewRLS's answers carry beyond the decision.
type RLSOption func(*RLS)

// WithIETFHeaders adds to every limited answer the IETF draft's
// RateLimit-Policy and RateLimit fields, and Retry-After when over the
// limit (see Headers), for Envoy to add to the client's response:
// ratelimitd's own, off by default as envoyproxy/ratelimit sends none.
func WithIETFHeaders() RLSOption { return func(r *RLS) { r.ietf = true } }

// WithUpstreamHeaders adds envoyproxy/ratelimit's headers
// (LIMIT_RESPONSE_HEADERS_ENABLED) under these names, as it computes them
// (see UpstreamHeaders); its defaults are "RateLimit-Limit",
// "RateLimit-Remaining" and "RateLimit-Reset".
func WithUpstreamHeaders(limit, remaining, reset string) RLSOption {
	return func(r *RLS) { r.upstream = &upstreamNames{limit, remaining, reset} }
}

// WithDynamicMetadata makes every answer carry Envoy dynamic metadata as
// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does: the domain, the
// request's descriptors (entries as "key=value", an override as text, a
// hits_addend), the request's hits_addend, and the metadata of the rules
// of every descriptor not over its limit, merged (see dynamicMetadata).
func WithDynamicMetadata() RLSOption { return func(r *RLS) { r.metadata = true } }

type upstreamNames struct{ limit, remaining, reset string }
