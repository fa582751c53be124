package config

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimit-go/ratelimit"
)

// Unit is a rate limit unit as Envoy's API numbers them
// (envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit).
type Unit int32

// The units, with Envoy's numbers; Unknown is a window that is none of them.
const (
	Unknown Unit = 0
	Second  Unit = 1
	Minute  Unit = 2
	Hour    Unit = 3
	Day     Unit = 4
	Month   Unit = 5
	Year    Unit = 6
	Week    Unit = 7
)

// Duration is the unit's window: envoyproxy/ratelimit's lengths, a month of
// 30 days and a year of 365, windows aligned to the Unix epoch.
func (u Unit) Duration() time.Duration {
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 30 * 24 * time.Hour
	case Year:
		return 365 * 24 * time.Hour
	}
	return 0
}

var unitNames = map[string]Unit{
	"second": Second, "minute": Minute, "hour": Hour, "day": Day,
	"week": Week, "month": Month, "year": Year,
}

// UnitOf is the unit whose window is d, or Unknown.
func UnitOf(d time.Duration) Unit {
	for _, u := range unitNames {
		if u.Duration() == d {
			return u
		}
	}
	return Unknown
}

var algorithms = map[string]ratelimit.Algorithm{
	"": ratelimit.FixedWindow, "fixed": ratelimit.FixedWindow, "sliding": ratelimit.SlidingWindow,
	"counter": ratelimit.SlidingWindowCounter, "gcra": ratelimit.GCRA,
}

// Rule is one configured rate_limit: what applies to the descriptors that
// match its place in the tree.
type Rule struct {
	// FullKey names the rule: the domain and the path of key or key_value
	// to it, joined by dots (envoyproxy/ratelimit's stat key).
	FullKey string
	// Name and Replaces: a rule named in another matched rule's Replaces is
	// not evaluated for that request.
	Name     string
	Replaces []string
	// Unlimited rules answer OK without touching the store.
	Unlimited bool
	// Shadow rules (shadow_mode) decide and record, and answer OK.
	Shadow bool
	// Quota rules (quota_mode) are pools: a request they match is over
	// only when every pool it matches is spent, or another rule denies it
	// (envoyproxy/ratelimit's quota mode; QUOTA_MODE makes every rule one).
	Quota bool
	// Detailed rules report metrics per descriptor value.
	Detailed bool
	// RequestsPerUnit and Unit are the limit as Envoy's API reports it.
	RequestsPerUnit uint32
	Unit            Unit
	// Window is the rule's window (the unit's, or the window extension's).
	Window time.Duration
	// Policy is what the library applies; zero when RequestsPerUnit is 0
	// (every request over the limit, as in envoyproxy/ratelimit) or the
	// rule is unlimited.
	Policy ratelimit.Policy
	// Also are the rule's further limits (the also extension), each a Rule
	// of its own limit and the rest of this one's, FullKey "...#1" on: a
	// request must pass every one, decided together.
	Also []*Rule
	// Metadata is the descriptor's metadata, which a response that this
	// rule does not deny carries in its dynamic metadata (envoyproxy/ratelimit's
	// RESPONSE_DYNAMIC_METADATA); nil when it has none. Read only.
	Metadata *structpb.Struct
	// File and Line locate the rule.
	File string
	Line int
}

// DeniesAll reports whether the rule admits nothing (requests_per_unit: 0).
func (r *Rule) DeniesAll() bool { return !r.Unlimited && r.RequestsPerUnit == 0 }

// Override is the rule for a request's own limit (a descriptor's
// RateLimitOverride): a fixed window of the unit, as envoyproxy/ratelimit
// applies it.
func Override(fullKey string, requestsPerUnit uint32, unit Unit) (*Rule, error) {
	r := &Rule{FullKey: fullKey, RequestsPerUnit: requestsPerUnit, Unit: unit, Window: unit.Duration()}
	if unit.Duration() == 0 {
		return nil, fmt.Errorf("%w: override: unknown unit %d", ErrInvalid, unit)
	}
	if requestsPerUnit > 0 {
		r.Policy = ratelimit.NewPolicy(ratelimit.FixedWindow, int(requestsPerUnit), unit.Duration())
		if err := r.Policy.Validate(); err != nil {
			return nil, fmt.Errorf("%w: override: %w", ErrInvalid, err)
		}
	}
	return r, nil
}

// rule compiles one rate_limit, checking what envoyproxy/ratelimit checks
// and the extensions.
func (b *builder) rule(fullKey string, d *yamlDescriptor) (*Rule, error) {
	y := d.RateLimit
	r := &Rule{
		FullKey: fullKey, Name: y.Name, Unlimited: y.Unlimited,
		Shadow: d.ShadowMode, Quota: d.QuotaMode, Detailed: d.DetailedMetric || d.ValueToMetric,
		File: b.file, Line: y.Line,
	}
	for _, rep := range y.Replaces {
		switch rep.Name {
		case "":
			return nil, invalid(b.file, y.Line, "a replaces entry has no name")
		case y.Name:
			return nil, invalid(b.file, y.Line, fmt.Sprintf("rule %q replaces itself", y.Name))
		}
		r.Replaces = append(r.Replaces, rep.Name)
	}
	if r.Unlimited {
		if y.Unit != "" || y.Window != "" || y.Algorithm != "" || y.Burst != 0 || len(y.Also) > 0 {
			return nil, invalid(b.file, y.Line, "an unlimited rule has no unit, window, algorithm, burst or also")
		}
		return r, nil
	}
	if err := b.limit(r, y); err != nil {
		return nil, err
	}
	for i := range y.Also {
		a := &y.Also[i]
		if a.Unlimited || a.Name != "" || len(a.Replaces) > 0 || len(a.Also) > 0 {
			return nil, invalid(b.file, a.Line, "an also limit has a unit or window, requests_per_unit, algorithm and burst only")
		}
		also := &Rule{FullKey: fmt.Sprintf("%s#%d", fullKey, i+1), Name: r.Name, Replaces: r.Replaces,
			Shadow: r.Shadow, Quota: r.Quota, Detailed: r.Detailed, File: b.file, Line: a.Line}
		if err := b.limit(also, a); err != nil {
			return nil, err
		}
		r.Also = append(r.Also, also)
	}
	return r, nil
}

// limit compiles y's limit into r: its unit or window, requests_per_unit,
// algorithm and burst.
func (b *builder) limit(r *Rule, y *yamlRateLimit) error {
	unit, known := unitNames[strings.ToLower(y.Unit)]
	if y.Unit != "" && !known {
		return invalid(b.file, y.Line, fmt.Sprintf("invalid rate limit unit %q", y.Unit))
	}
	window := unit.Duration()
	if y.Window != "" {
		w, err := time.ParseDuration(y.Window)
		if err != nil {
			return invalid(b.file, y.Line, fmt.Sprintf("window %q: %v", y.Window, err))
		}
		if y.Unit != "" && w != window {
			return invalid(b.file, y.Line, fmt.Sprintf("unit %s and window %s disagree: give one", y.Unit, y.Window))
		}
		window, unit = w, UnitOf(w)
	}
	if window == 0 {
		return invalid(b.file, y.Line, "a rate_limit needs a unit (or a window)")
	}
	r.Unit, r.Window, r.RequestsPerUnit = unit, window, y.RequestsPerUnit
	alg, ok := algorithms[strings.ToLower(y.Algorithm)]
	if !ok {
		return invalid(b.file, y.Line, fmt.Sprintf("unknown algorithm %q: fixed, sliding, counter or gcra", y.Algorithm))
	}
	if y.Burst != 0 && alg != ratelimit.GCRA {
		return invalid(b.file, y.Line, "burst applies to algorithm gcra only")
	}
	if r.RequestsPerUnit == 0 {
		return nil // denies every request, without a store
	}
	r.Policy = ratelimit.NewPolicy(alg, int(r.RequestsPerUnit), window)
	if alg == ratelimit.GCRA {
		burst := int(y.Burst)
		if burst == 0 {
			burst = int(r.RequestsPerUnit)
		}
		r.Policy = ratelimit.TokenBucket(int(r.RequestsPerUnit), window, burst)
	}
	if err := r.Policy.Validate(); err != nil {
		return invalid(b.file, y.Line, err.Error())
	}
	return nil
}
