package service

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
)

// ruleSet is one configuration with the Limiters of its rules, built on
// first use: a reload builds a new set, and requests in flight keep theirs.
type ruleSet struct {
	cfg      *config.Config
	svc      *Service
	limiters sync.Map // *config.Rule → *ratelimit.Limiter
	// overrides are the rules of requests' own limits, by limit and unit;
	// bounded, since clients choose them.
	overrides *lru.Cache[overrideKey, overridden]
}

// overridden is a request-supplied limit, compiled.
type overridden struct {
	rule    *config.Rule
	limiter *ratelimit.Limiter // nil when it denies every request
}

type overrideKey struct {
	perUnit uint32
	unit    config.Unit
}

// maxOverrides bounds the distinct request-supplied limits kept compiled.
const maxOverrides = 1024

func (s *Service) newRuleSet(cfg *config.Config) (*ruleSet, error) {
	if cfg == nil {
		return nil, fmt.Errorf("%w: nil config", ratelimit.ErrInvalidArgument)
	}
	o, err := lru.New[overrideKey, overridden](maxOverrides)
	if err != nil {
		return nil, err
	}
	return &ruleSet{cfg: cfg, svc: s, overrides: o}, nil
}

// limiter is rule's Limiter. Every rule's Limiter shares the service's prefix:
// keys carry the domain and the descriptor, so rules never share state, and
// a rule reloaded unchanged (or with a new limit) keeps its counters.
func (rs *ruleSet) limiter(rule *config.Rule) (*ratelimit.Limiter, error) {
	if l, ok := rs.limiters.Load(rule); ok {
		return l.(*ratelimit.Limiter), nil
	}
	l, err := rs.newLimiter(rule)
	if err != nil {
		return nil, err
	}
	actual, _ := rs.limiters.LoadOrStore(rule, l)
	return actual.(*ratelimit.Limiter), nil
}

func (rs *ruleSet) newLimiter(rule *config.Rule) (*ratelimit.Limiter, error) {
	opts := append([]ratelimit.Option{ratelimit.WithName(rule.FullKey), ratelimit.WithPrefix(rs.svc.prefix)}, rs.svc.opts...)
	if rule.Shadow || rs.svc.shadowMode {
		opts = append(opts, rs.svc.shadow...)
	}
	l, err := ratelimit.New(rs.svc.store, rule.Policy, opts...)
	if err != nil {
		return nil, fmt.Errorf("rule %s: %w", rule.FullKey, err)
	}
	return l, nil
}

// check is one limited descriptor to decide.
type check struct {
	index   int // in the request
	rule    *config.Rule
	limiter *ratelimit.Limiter // nil when the rule denies every request
	key     string
	cost    int
	// usage: the descriptor's own cost (hits_addend), counted as upstream
	// counts it: charged whatever the quota, or for 0 checked.
	usage bool
}

// match finds descriptor i's rule and, for a limited one, its Limiter and key.
func (rs *ruleSet) match(req Request, i int, d Descriptor) (check, error) {
	c := check{index: i, cost: 1}
	switch {
	case d.Cost != nil:
		c.cost, c.usage = int(*d.Cost), true
	case req.Cost > 0:
		c.cost = int(req.Cost)
	}
	var shared []string
	if d.Override != nil {
		o, err := rs.override(*d.Override)
		if err != nil {
			return c, fmt.Errorf("%w: descriptor %d: %w", ErrBadRequest, i, err)
		}
		c.rule, c.limiter = o.rule, o.limiter
	} else {
		c.rule, shared = rs.cfg.Match(req.Domain, d.Entries)
	}
	if c.rule == nil || c.rule.Unlimited {
		return c, nil
	}
	var unit config.Unit // 0: the tree's rule
	if d.Override != nil {
		unit = d.Override.Unit
	}
	c.key = key(req.Domain, d.Entries, shared, unit)
	if len(c.key) > ratelimit.MaxKeyLen {
		return c, fmt.Errorf("%w: descriptor %d is %d bytes, more than %d", ErrBadRequest, i, len(c.key), ratelimit.MaxKeyLen)
	}
	c.key = hashLong(c.key)
	if c.rule.DeniesAll() || c.limiter != nil {
		return c, nil
	}
	l, err := rs.limiter(c.rule)
	c.limiter = l
	return c, err
}

// also are the checks of c's rule's further limits (config.Rule.Also), on
// the same descriptor: each its own Limiter and key (c's, "|#n" after), so
// that no two limits share a counter.
func (rs *ruleSet) also(c check) ([]check, error) {
	if len(c.rule.Also) == 0 {
		return nil, nil
	}
	more := make([]check, len(c.rule.Also))
	for i, a := range c.rule.Also {
		m := c
		m.rule, m.limiter, m.key = a, nil, c.key+"|#"+strconv.Itoa(i+1)
		if !a.DeniesAll() {
			l, err := rs.limiter(a)
			if err != nil {
				return nil, err
			}
			m.limiter = l
		}
		more[i] = m
	}
	return more, nil
}

// override is the rule of a request-supplied limit.
func (rs *ruleSet) override(o Override) (overridden, error) {
	k := overrideKey{o.RequestsPerUnit, o.Unit}
	if v, ok := rs.overrides.Get(k); ok {
		return v, nil
	}
	r, err := config.Override("override", o.RequestsPerUnit, o.Unit)
	if err != nil {
		return overridden{}, err
	}
	v := overridden{rule: r}
	if !r.DeniesAll() {
		if v.limiter, err = rs.newLimiter(r); err != nil {
			return overridden{}, err
		}
	}
	rs.overrides.Add(k, v)
	return v, nil
}

// key is a descriptor's key in the store: the domain and every entry, each
// length-prefixed so that no two descriptors write the same key whatever
// bytes their values hold ("api", user=alice → "3:api|4:user=5:alice").
// An override's counter is apart from the tree's, and apart for each unit
// ("o3|" for an hour): an override of 3 per hour once shared its counter
// with one of 1000 per second on the same descriptor.
func key(domain string, entries []config.Entry, shared []string, override config.Unit) string {
	n := len(domain) + 4
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 12
	}
	b := make([]byte, 0, n)
	if override != 0 {
		b = append(b, 'o')
		b = strconv.AppendInt(b, int64(override), 10)
		b = append(b, '|')
	}
	b = appendPart(b, domain)
	for i, e := range entries {
		v := e.Value
		if shared != nil && shared[i] != "" {
			v = shared[i]
		}
		b = append(b, '|')
		b = appendPart(b, e.Key)
		b = append(b, '=')
		b = appendPart(b, v)
	}
	return string(b)
}

// longKey is the length over which a key is kept as its SHA-256: a client
// controls the values it sends, and keys of 4 KiB took the memory store to
// 870 MB at its default 100,000 keys. No key of key's starts with '#'.
const longKey = 128

// hashLong is k, or for a key longer than longKey "#" and its SHA-256
// (base64url): 44 bytes, never shared by two keys in practice.
func hashLong(k string) string {
	if len(k) <= longKey {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return "#" + base64.RawURLEncoding.EncodeToString(sum[:])
}

func appendPart(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}
