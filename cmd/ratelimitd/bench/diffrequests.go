package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v2"
)

// The differential's inputs: envoyproxy/ratelimit's configurations, their
// rules, and the requests made from them (see diff.go).

// diffSets are the configurations, each a directory of files loaded at once.
func diffSets(upstream string) ([][]string, error) {
	sets := [][]string{
		{filepath.Join(upstream, "examples-config", "config.yaml"), filepath.Join(upstream, "examples-config", "example.yaml")},
		{filepath.Join(upstream, "integration-config", "another.yaml"), filepath.Join(upstream, "integration-config", "basic.yaml"), filepath.Join(upstream, "integration-config", "share_threshold.yaml")},
	}
	good := []string{"basic_config.yaml", "metadata.yaml", "shadowmode_config.yaml", "share_threshold.yaml", "wildcard.yaml", "merge_domain_key1.yaml"}
	for _, f := range good {
		sets = append(sets, []string{filepath.Join(upstream, "test-config", f)})
	}
	for _, set := range sets {
		for _, f := range set {
			if _, err := os.Stat(f); err != nil {
				return nil, err
			}
		}
	}
	return sets, nil
}

// diffRule is a rule of a configuration: its domain, the entries that
// reach it, and its limit.
type diffRule struct {
	domain  string
	entries [][2]string
	limit   int
	other   [][2]string // entries that a wildcard does not match, or nil
}

// rulesOf walks a configuration file's tree.
func rulesOf(path string) ([]diffRule, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var root struct {
		Domain      string
		Descriptors []diffDescriptor
	}
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, err
	}
	var out []diffRule
	var walk func(prefix [][2]string, ds []diffDescriptor)
	walk = func(prefix [][2]string, ds []diffDescriptor) {
		for _, d := range ds {
			value, other := d.Value, ""
			switch {
			case value == "":
				value = "v1"
			case strings.Contains(value, "*"):
				value, other = strings.ReplaceAll(value, "*", "x"), "nomatch"+strings.ReplaceAll(value, "*", "")
			}
			entries := append(append([][2]string{}, prefix...), [2]string{d.Key, value})
			if d.RateLimit != nil {
				r := diffRule{domain: root.Domain, entries: entries, limit: d.RateLimit.RequestsPerUnit}
				if other != "" {
					r.other = append(append([][2]string{}, prefix...), [2]string{d.Key, other})
				}
				out = append(out, r)
			}
			walk(entries, d.Descriptors)
		}
	}
	walk(nil, root.Descriptors)
	return out, nil
}

type diffDescriptor struct {
	Key, Value string
	RateLimit  *struct {
		RequestsPerUnit int `yaml:"requests_per_unit"`
	} `yaml:"rate_limit"`
	Descriptors []diffDescriptor
}

// requestsOf are the requests of a set's rules, in order.
func requestsOf(rules []diffRule) []*rlsv3.RateLimitRequest {
	desc := func(entries [][2]string) *rlv3.RateLimitDescriptor {
		d := &rlv3.RateLimitDescriptor{}
		for _, e := range entries {
			d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
		}
		return d
	}
	var out []*rlsv3.RateLimitRequest
	ask := func(domain string, hits uint32, ds ...*rlv3.RateLimitDescriptor) {
		out = append(out, &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: ds})
	}
	for _, r := range rules {
		for i := 0; i < min(r.limit, 10)+2; i++ {
			ask(r.domain, 0, desc(r.entries))
		}
		if r.other != nil {
			ask(r.domain, 0, desc(r.other))
		}
	}
	for i := 0; i+1 < len(rules); i++ {
		a, b := rules[i], rules[i+1]
		if a.domain != b.domain {
			continue
		}
		for j := 0; j < 3; j++ {
			ask(a.domain, 0, desc(append(append([][2]string{}, a.entries...), [2]string{"pair", fmt.Sprint(i)})), desc(a.entries), desc(b.entries))
		}
	}
	for _, r := range rules {
		entries := append(append([][2]string{}, r.entries[:len(r.entries)-1]...), [2]string{r.entries[len(r.entries)-1][0], r.entries[len(r.entries)-1][1] + "-hits"})
		if strings.Contains(r.entries[len(r.entries)-1][1], "x") || len(r.entries) == 0 {
			continue // a wildcard's other values count under the pattern: left to the first part
		}
		ask(r.domain, 3, desc(entries))
		check, report := desc(entries), desc(entries)
		check.HitsAddend = wrapperspb.UInt64(0)
		report.HitsAddend = wrapperspb.UInt64(uint64(r.limit + 3))
		ask(r.domain, 0, check)
		ask(r.domain, 0, report)
		ask(r.domain, 0, check)
		ask(r.domain, 1, desc(entries))
	}
	return out
}
