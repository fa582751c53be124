// Package config reads ratelimitd's configuration: YAML files in the format
// of envoyproxy/ratelimit, extended. Every file envoyproxy/ratelimit accepts
// loads unchanged and means the same; the extensions live under a
// rate_limit and are rejected elsewhere:
//
//	domain: api
//	descriptors:
//	  - key: user                 # any value: one counter per user
//	    rate_limit:
//	      unit: minute            # second, minute, hour, day, week, month (30 days), year (365 days)
//	      requests_per_unit: 100
//	      algorithm: sliding      # extension: fixed (the default), sliding, counter, gcra
//	      window: 90s             # extension: any window instead of a unit
//	      burst: 20               # extension: gcra's burst (default requests_per_unit)
//	      also:                   # extension: more limits on the same descriptor, all decided together
//	        - {unit: day, requests_per_unit: 10000}
//
// A Config is immutable once loaded: a reload builds a new one, so a request
// decides entirely under the Config it started with.
package config

import (
	"errors"
	"fmt"
	"sort"

	"gopkg.in/yaml.v3"
)

// ErrInvalid is wrapped by every error of a configuration that does not load;
// the error's text starts with the file and line of the problem.
var ErrInvalid = errors.New("invalid configuration")

// Config is the loaded configuration: the descriptor tree of each domain.
type Config struct {
	domains map[string]*node
	// Files are the files it was loaded from, in load order.
	Files []string
}

// Domains are the configured domains, sorted.
func (c *Config) Domains() []string {
	ds := make([]string, 0, len(c.domains))
	for d := range c.domains {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	return ds
}

// HasDomain reports whether domain is configured.
func (c *Config) HasDomain(domain string) bool { _, ok := c.domains[domain]; return ok }

// invalid is a configuration error at file:line (line 0: the whole file).
func invalid(file string, line int, problem string) error {
	if line == 0 {
		return fmt.Errorf("%w: %s: %s", ErrInvalid, file, problem)
	}
	return fmt.Errorf("%w: %s:%d: %s", ErrInvalid, file, line, problem)
}

// envoyKeys are the keys envoyproxy/ratelimit accepts, at any depth (it checks
// names only, so a file using one at an odd place still loads there).
var envoyKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true,
	"unit": true, "requests_per_unit": true, "unlimited": true, "shadow_mode": true,
	"quota_mode": true, "name": true, "replaces": true, "detailed_metric": true,
	"value_to_metric": true, "share_threshold": true, "metadata": true,
}

// extensionKeys are this service's own, valid only inside a rate_limit.
var extensionKeys = map[string]bool{"algorithm": true, "window": true, "burst": true, "also": true}

// checkKeys rejects an unknown key, naming its line, as envoyproxy/ratelimit
// rejects one (a misspelt key silently ignored would be a limit not applied).
func checkKeys(file string, n *yaml.Node, inRateLimit bool) error {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" { // "<<": the keys merged in are checked
				if err := checkMerged(file, v, inRateLimit); err != nil {
					return err
				}
				continue
			}
			if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
				return invalid(file, k.Line, fmt.Sprintf("key %q is not a string", k.Value))
			}
			switch {
			case extensionKeys[k.Value] && !inRateLimit:
				return invalid(file, k.Line, fmt.Sprintf("%q belongs under a rate_limit", k.Value))
			case !envoyKeys[k.Value] && !extensionKeys[k.Value]:
				return invalid(file, k.Line, fmt.Sprintf("unknown key %q", k.Value))
			}
			if k.Value == "metadata" {
				continue // free-form: what it holds is checked as it is read (see metadata)
			}
			if err := checkKeys(file, v, k.Value == "rate_limit" || inRateLimit && k.Value == "also"); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for _, e := range n.Content {
			if e.Kind == yaml.AliasNode {
				e = e.Alias
			}
			if e.Kind != yaml.MappingNode {
				return invalid(file, e.Line, "a list holds something other than a mapping")
			}
			if err := checkKeys(file, e, inRateLimit); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		if n.Tag == "!!float" { // envoyproxy/ratelimit takes text, whole numbers and booleans only
			return invalid(file, n.Line, fmt.Sprintf("%s is a number with a fraction: quote it for a value", n.Value))
		}
	case yaml.AliasNode:
		return checkKeys(file, n.Alias, inRateLimit)
	default:
		return invalid(file, n.Line, "unexpected YAML node")
	}
	return nil
}

// checkMerged checks what a merge key ("<<") brings: a mapping, or a list
// of them, each usually an alias.
func checkMerged(file string, v *yaml.Node, inRateLimit bool) error {
	if v.Kind == yaml.SequenceNode {
		for _, e := range v.Content {
			if err := checkKeys(file, e, inRateLimit); err != nil {
				return err
			}
		}
		return nil
	}
	return checkKeys(file, v, inRateLimit)
}

// The file's shape, as decoded.
type yamlRoot struct {
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors"`
}

type yamlDescriptor struct {
	Key            string         `yaml:"key"`
	Value          string         `yaml:"value"`
	RateLimit      *yamlRateLimit `yaml:"rate_limit"`
	Descriptors    []yamlDescriptor
	ShadowMode     bool `yaml:"shadow_mode"`
	QuotaMode      bool `yaml:"quota_mode"`
	DetailedMetric bool `yaml:"detailed_metric"`
	ValueToMetric  bool `yaml:"value_to_metric"`
	ShareThreshold bool `yaml:"share_threshold"`
	Metadata       any  `yaml:"metadata"`
	// Line is where the descriptor starts, for error messages.
	Line int `yaml:"-"`
}

type yamlRateLimit struct {
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unit            string `yaml:"unit"`
	Unlimited       bool   `yaml:"unlimited"`
	Name            string `yaml:"name"`
	Replaces        []struct {
		Name string `yaml:"name"`
	} `yaml:"replaces"`
	Algorithm string          `yaml:"algorithm"`
	Window    string          `yaml:"window"`
	Burst     uint32          `yaml:"burst"`
	Also      []yamlRateLimit `yaml:"also"`
	Line      int             `yaml:"-"`
}

// UnmarshalYAML records where a descriptor starts.
func (d *yamlDescriptor) UnmarshalYAML(n *yaml.Node) error {
	type plain yamlDescriptor
	if err := n.Decode((*plain)(d)); err != nil {
		return err
	}
	d.Line = n.Line
	return nil
}

// UnmarshalYAML records where a rate_limit starts.
func (r *yamlRateLimit) UnmarshalYAML(n *yaml.Node) error {
	type plain yamlRateLimit
	if err := n.Decode((*plain)(r)); err != nil {
		return err
	}
	r.Line = n.Line
	return nil
}
