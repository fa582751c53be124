package config

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/ratelimit-go/ratelimit"
)

// Rules are every rule of the configuration, sorted by full key.
func (c *Config) Rules() []*Rule {
	var rules []*Rule
	var walk func(n *node)
	walk = func(n *node) {
		if n.rule != nil {
			rules = append(rules, n.rule)
			rules = append(rules, n.rule.Also...)
		}
		for _, child := range n.children {
			walk(child)
		}
	}
	for _, n := range c.domains {
		walk(n)
	}
	sort.Slice(rules, func(i, j int) bool { return rules[i].FullKey < rules[j].FullKey })
	return rules
}

// Dump writes a line per rule, sorted, as envoyproxy/ratelimit's /rlconfig
// writes them ("api.user: unit=MINUTE requests_per_unit=100, shadow_mode:
// false, quota_mode: false"), followed by this service's extensions where a
// rule uses them (a window that is no unit, an algorithm other than fixed
// windows, the burst).
func (c *Config) Dump(w io.Writer) error {
	for _, r := range c.Rules() {
		unit := "UNKNOWN"
		if r.Unit != Unknown {
			unit = strings.ToUpper(r.Unit.name())
		}
		line := fmt.Sprintf("%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t", r.FullKey, unit, r.RequestsPerUnit, r.Shadow, r.Quota)
		if r.Unit == Unknown && r.Window != 0 {
			line += fmt.Sprintf(", window: %v", r.Window)
		}
		if r.Policy.Limit != 0 && r.Policy.Algorithm != ratelimit.FixedWindow {
			line += fmt.Sprintf(", algorithm: %v", r.Policy.Algorithm)
			if r.Policy.Burst != 0 {
				line += fmt.Sprintf(", burst: %d", r.Policy.Burst)
			}
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

// name is the unit's name in a configuration ("minute").
func (u Unit) name() string {
	for n, v := range unitNames {
		if v == u {
			return n
		}
	}
	return ""
}
