// Package service decides ratelimitd's requests: a domain and descriptors,
// matched against the configuration's rules, decided by the library's
// Limiters on one shared store. The gRPC (Envoy's rate limit service) and
// HTTP front ends translate to and from its Request and Result.
package service

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
)

// Errors of a request that cannot be decided; the front ends map them to
// their status codes (InvalidArgument / 400, NotFound / 404, Unavailable /
// 503).
var (
	ErrBadRequest    = errors.New("bad request")
	ErrUnknownDomain = errors.New("unknown domain")
	ErrStore         = ratelimit.ErrStore
)

// Request is one question: does this request pass every descriptor's limit?
type Request struct {
	Domain      string
	Descriptors []Descriptor
	// Cost is what the request counts for under each limit (Envoy's
	// hits_addend); 0 means 1.
	Cost uint64
}

// Descriptor is one list of key/value entries, matched against the
// domain's tree.
type Descriptor struct {
	Entries []config.Entry
	// Cost, when set (Envoy's per-descriptor hits_addend), replaces the
	// request's for this descriptor, and reports usage as upstream counts
	// it: recorded whatever the quota left (a charge), over the limit once
	// the count passes it; 0 checks the limit without counting.
	Cost *uint64
	// Override, when set, is the request's own limit for this descriptor
	// (Envoy's RateLimitOverride): it applies instead of the tree's.
	Override *Override
}

// Override is a limit a request carries for one of its descriptors.
type Override struct {
	RequestsPerUnit uint32
	Unit            config.Unit
}

// Result is the answer: OverLimit when any enforced descriptor is over its
// limit, and one Status per descriptor, in the request's order.
type Result struct {
	OverLimit bool
	// Shadowed says the request was over its limits and answered OK, as
	// Options.ShadowMode answers every request (its statuses keep their
	// verdicts).
	Shadowed bool
	Statuses []Status
}

// Status is one descriptor's outcome.
type Status struct {
	// Rule is the limit applied; nil when no rule matched or it was
	// replaced (the descriptor is not limited).
	Rule *config.Rule
	// OverLimit is this descriptor's verdict as answered: false under a
	// shadow rule even when its limit is exceeded (Shadowed then says so).
	OverLimit bool
	Shadowed  bool
	// Decision is the library's when the descriptor was decided (see
	// Asked); for a rule that admits nothing, a denial with nothing left.
	Decision ratelimit.Decision
	// Name is the rule's name in headers.
	Name string
	// Hits is what the request counts for under the rule (its cost), and
	// Counted whether the store recorded them (an admission, a charge).
	Hits    int
	Counted bool
}

// Asked reports whether the descriptor was decided: not when no rule
// applies, the rule is unlimited, or another descriptor's denial kept it
// from being asked.
func (s Status) Asked() bool { return !s.Decision.At.IsZero() }

// Service decides requests under the configuration it was last given.
type Service struct {
	store    backend.Store
	opts     []ratelimit.Option
	shadow   []ratelimit.Option
	detailed func(Detail)
	decided  func(Detail)
	rules    atomic.Pointer[ruleSet]
	prefix   string
	limits   Limits
	// strict and unknown: see Options.StrictDomains and UnknownDomain.
	strict  bool
	unknown func(domain string)
	// countAll, quotaMode, shadowMode: see Options.CountOverLimit,
	// QuotaMode and ShadowMode.
	countAll, quotaMode, shadowMode bool
}

// Limits bound the work one request may ask for: a request beyond them is
// refused at once (ErrBadRequest: InvalidArgument, 400), before any
// matching or store call. The defaults are far above what Envoy's route
// actions produce (a descriptor per action, an entry per key).
type Limits struct {
	// Descriptors per request (default DefaultMaxDescriptors).
	Descriptors int
	// Entries per descriptor (default DefaultMaxEntries).
	Entries int
}

// The default Limits.
const (
	DefaultMaxDescriptors = 64
	DefaultMaxEntries     = 16
)

// Options configure a Service.
type Options struct {
	// Limiter options apply to every Limiter the Service builds (an
	// observer, a timeout).
	Limiter []ratelimit.Option
	// Shadow options apply after them to the Limiters of rules that never
	// deny (shadow_mode, and every rule under ShadowMode): an observer that
	// marks their events DryRun, so that their denials stay apart.
	Shadow []ratelimit.Option
	// Detailed, when set, is called with every decision of a rule marked
	// detailed_metric (or value_to_metric): metrics per descriptor value.
	Detailed func(Detail)
	// Decided, when set, is called with every decision of every rule
	// (Detail.Descriptor is empty but for detailed rules).
	Decided func(Detail)
	// Limits bound each request's work; zero fields take the defaults.
	Limits Limits
	// StrictDomains makes a request for a domain the configuration does
	// not hold an error (ErrUnknownDomain: NotFound, 404). By default it is
	// answered as envoyproxy/ratelimit answers it: OK, every descriptor
	// unlimited, so that a rollout that reaches Envoy before the
	// configuration does not reject traffic under failure_mode_deny.
	StrictDomains bool
	// UnknownDomain, when set, is called for each request answered OK for
	// an unknown domain (to count them).
	UnknownDomain func(domain string)
	// CountOverLimit counts every hit as envoyproxy/ratelimit does (unless
	// its STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT): each descriptor is
	// charged the request's cost whatever the others answer, a denied
	// request's included, and is over once its count passes its limit. By
	// default a request that a limit denies consumes nothing from any.
	CountOverLimit bool
	// QuotaMode makes every rule a quota pool (envoyproxy/ratelimit's
	// QUOTA_MODE; see config.Rule.Quota).
	QuotaMode bool
	// ShadowMode answers OK to every request, each decided and recorded as
	// usual (envoyproxy/ratelimit's SHADOW_MODE; Result.Shadowed).
	ShadowMode bool
}

// Detail is one decision of a detailed rule.
type Detail struct {
	// Rule is the rule's full key; Descriptor the request's descriptor in
	// the same form, with its values ("api.user_alice").
	Rule, Descriptor string
	Status           Status
}

// Prefix namespaces every key ratelimitd writes in the store.
const Prefix = "ratelimitd:"

// New returns a Service deciding on store under cfg.
func New(store backend.Store, cfg *config.Config, o Options) (*Service, error) {
	if store == nil || cfg == nil {
		return nil, fmt.Errorf("%w: nil store or config", ratelimit.ErrInvalidArgument)
	}
	if o.Limits.Descriptors < 0 || o.Limits.Entries < 0 {
		return nil, fmt.Errorf("%w: negative limits %+v", ratelimit.ErrInvalidArgument, o.Limits)
	}
	if o.Limits.Descriptors == 0 {
		o.Limits.Descriptors = DefaultMaxDescriptors
	}
	if o.Limits.Entries == 0 {
		o.Limits.Entries = DefaultMaxEntries
	}
	s := &Service{store: store, opts: o.Limiter, shadow: o.Shadow, detailed: o.Detailed, decided: o.Decided, prefix: Prefix, limits: o.Limits,
		strict: o.StrictDomains, unknown: o.UnknownDomain,
		countAll: o.CountOverLimit, quotaMode: o.QuotaMode, shadowMode: o.ShadowMode}
	rs, err := s.newRuleSet(cfg)
	if err != nil {
		return nil, err
	}
	s.rules.Store(rs)
	return s, nil
}

// SetConfig makes cfg apply to every request that starts after it returns;
// a request already deciding finishes under the configuration it started
// with. Counters carry over: a rule keeps its keys across reloads.
func (s *Service) SetConfig(cfg *config.Config) error {
	rs, err := s.newRuleSet(cfg)
	if err != nil {
		return err
	}
	s.rules.Store(rs)
	return nil
}

// Config is the configuration in force.
func (s *Service) Config() *config.Config { return s.rules.Load().cfg }

// maxCost bounds a request's cost: the library's costs are ints, and no
// limit exceeds ratelimit.MaxLimit anyway.
const maxCost = math.MaxInt32

// Decide answers req. Bad input is an error wrapping ErrBadRequest (or,
// with StrictDomains, ErrUnknownDomain) that records nothing; a domain the
// configuration does not hold is otherwise answered OK, every descriptor
// unlimited. A store that cannot answer (with no degraded mode to stand
// in) is an error wrapping ErrStore.
//
// The store is asked under the Limiters' time budget (-timeout), not the
// caller's deadline: a client whose deadline is shorter than a healthy
// store needs gets its DeadlineExceeded from gRPC, and tells the guard
// nothing (a 300 µs deadline once opened the breaker for every client);
// a store that stalls still runs every call out of its budget, which the
// guard counts. Work stays bounded by the streams a connection may hold.
func (s *Service) Decide(ctx context.Context, req Request) (Result, error) {
	ctx = context.WithoutCancel(ctx)
	rs := s.rules.Load()
	if err := s.validate(req); err != nil {
		return Result{}, err
	}
	if !rs.cfg.HasDomain(req.Domain) {
		if s.strict {
			return Result{}, fmt.Errorf("%w: %q", ErrUnknownDomain, req.Domain)
		}
		if s.unknown != nil {
			s.unknown(req.Domain)
		}
		return Result{Statuses: make([]Status, len(req.Descriptors))}, nil
	}
	res := Result{Statuses: make([]Status, len(req.Descriptors))}
	var stack [stackChecks]check
	checks := stack[:0]
	if len(req.Descriptors) > len(stack) {
		checks = make([]check, 0, len(req.Descriptors))
	}
	var replaced []string
	for i, d := range req.Descriptors {
		c, err := rs.match(req, i, d)
		if err != nil {
			return Result{}, err
		}
		st := &res.Statuses[i]
		st.Rule = c.rule
		if c.rule == nil {
			continue
		}
		st.Name, st.Hits = nameOf(c.rule), c.cost
		replaced = append(replaced, c.rule.Replaces...)
		if !c.rule.Unlimited {
			checks = append(checks, c)
			more, err := rs.also(c)
			if err != nil {
				return Result{}, err
			}
			checks = append(checks, more...)
		}
	}
	checks = withoutReplaced(checks, replaced, res.Statuses)
	if err := s.decide(ctx, checks, &res); err != nil {
		return Result{}, err
	}
	if res.OverLimit && s.shadowMode {
		res.OverLimit, res.Shadowed = false, true
	}
	if s.detailed != nil || s.decided != nil {
		s.report(req, res)
	}
	return res, nil
}

// report calls the hooks for the decided statuses: Decided for every one,
// Detailed for those of detailed rules.
func (s *Service) report(req Request, res Result) {
	for i, st := range res.Statuses {
		if st.Rule == nil || st.Rule.Unlimited || !st.Asked() && !st.Rule.DeniesAll() {
			continue
		}
		if !st.Rule.Detailed || s.detailed == nil {
			if s.decided != nil {
				s.decided(Detail{Rule: st.Rule.FullKey, Status: st})
			}
			continue
		}
		var b strings.Builder
		b.WriteString(req.Domain)
		for _, e := range req.Descriptors[i].Entries {
			b.WriteString(".")
			b.WriteString(e.Key)
			if e.Value != "" {
				b.WriteString("_")
				b.WriteString(e.Value)
			}
		}
		d := Detail{Rule: st.Rule.FullKey, Descriptor: b.String(), Status: st}
		if st.Asked() {
			s.detailed(d)
		}
		if s.decided != nil {
			s.decided(d)
		}
	}
}

func (s *Service) validate(req Request) error {
	switch {
	case req.Domain == "":
		return fmt.Errorf("%w: the domain is empty", ErrBadRequest)
	case len(req.Descriptors) == 0:
		return fmt.Errorf("%w: no descriptors", ErrBadRequest)
	case len(req.Descriptors) > s.limits.Descriptors:
		return fmt.Errorf("%w: %d descriptors, more than %d", ErrBadRequest, len(req.Descriptors), s.limits.Descriptors)
	case req.Cost > maxCost:
		return fmt.Errorf("%w: cost %d over %d", ErrBadRequest, req.Cost, maxCost)
	}
	for i, d := range req.Descriptors {
		switch {
		case len(d.Entries) == 0:
			return fmt.Errorf("%w: descriptor %d has no entries", ErrBadRequest, i)
		case len(d.Entries) > s.limits.Entries:
			return fmt.Errorf("%w: descriptor %d has %d entries, more than %d", ErrBadRequest, i, len(d.Entries), s.limits.Entries)
		}
		for _, e := range d.Entries {
			switch {
			case e.Key == "":
				return fmt.Errorf("%w: descriptor %d has an entry with an empty key", ErrBadRequest, i)
			case len(e.Key)+len(e.Value) > ratelimit.MaxKeyLen:
				return fmt.Errorf("%w: descriptor %d has an entry of %d bytes, more than a key may hold", ErrBadRequest, i, len(e.Key)+len(e.Value))
			}
		}
		if d.Cost != nil && *d.Cost > maxCost {
			return fmt.Errorf("%w: descriptor %d: cost %d over %d", ErrBadRequest, i, *d.Cost, maxCost)
		}
	}
	return nil
}

// withoutReplaced drops the checks whose rule another matched rule
// replaces: their descriptors are answered as not limited.
func withoutReplaced(checks []check, replaced []string, sts []Status) []check {
	if len(replaced) == 0 {
		return checks
	}
	kept := checks[:0]
	for _, c := range checks {
		if c.rule.Name != "" && contains(replaced, c.rule.Name) {
			sts[c.index].Rule, sts[c.index].Name = nil, ""
			continue
		}
		kept = append(kept, c)
	}
	return kept
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// stackChecks is how many checks a request's lists hold on the stack: a
// make whose length is known only at run time is always the heap's, and a
// request seldom has more descriptors than this.
const stackChecks = 8

// nameOf is how a rule is named in headers: its name, else its full key.
func nameOf(r *config.Rule) string {
	if r.Name != "" {
		return r.Name
	}
	return r.FullKey
}
