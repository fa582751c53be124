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
//
// A Config is immutable once loaded: a reload builds a new one, so a request
// decides entirely under the Config it started with.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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

// Load reads path: one YAML file (one domain per document; several documents
// separated by "---" are several domains), or a directory whose *.yaml and
// *.yml files are read in name order, as envoyproxy/ratelimit reads its
// runtime directory. A domain configured twice is an error.
func Load(path string) (*Config, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	files := []string{path}
	if info.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		files = files[:0]
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
		if len(files) == 0 { // as an empty file is: every domain would be unknown
			return nil, fmt.Errorf("%w: %s holds no *.yaml or *.yml file", ErrInvalid, path)
		}
	}
	c := &Config{domains: map[string]*node{}}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if err := c.add(f, data); err != nil {
			return nil, err
		}
		c.Files = append(c.Files, f)
	}
	return c, nil
}

// Parse loads one file's content; name is used in error messages.
func Parse(name string, data []byte) (*Config, error) {
	c := &Config{domains: map[string]*node{}, Files: []string{name}}
	if err := c.add(name, data); err != nil {
		return nil, err
	}
	return c, nil
}

// add loads every document of one file.
func (c *Config) add(file string, data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for docs := 0; ; docs++ {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			if docs == 0 {
				return invalid(file, 0, "the file holds no domain")
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrInvalid, file, err)
		}
		if err := c.addDocument(file, &doc); err != nil {
			return err
		}
	}
}

func (c *Config) addDocument(file string, doc *yaml.Node) error {
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if err := checkKeys(file, doc, false); err != nil {
		return err
	}
	var root yamlRoot
	if err := doc.Decode(&root); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, file, err)
	}
	if root.Domain == "" {
		return invalid(file, doc.Line, "the domain is empty or missing")
	}
	if _, dup := c.domains[root.Domain]; dup {
		return invalid(file, doc.Line, fmt.Sprintf("domain %q is configured twice", root.Domain))
	}
	b := builder{file: file, domain: root.Domain}
	n, err := b.children(root.Domain, root.Descriptors)
	if err != nil {
		return err
	}
	c.domains[root.Domain] = n
	return nil
}

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
	"value_to_metric": true, "share_threshold": true,
}

// extensionKeys are this service's own, valid only inside a rate_limit.
var extensionKeys = map[string]bool{"algorithm": true, "window": true, "burst": true}

// checkKeys rejects an unknown key, naming its line, as envoyproxy/ratelimit
// rejects one (a misspelt key silently ignored would be a limit not applied).
func checkKeys(file string, n *yaml.Node, inRateLimit bool) error {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
				return invalid(file, k.Line, fmt.Sprintf("key %q is not a string", k.Value))
			}
			switch {
			case extensionKeys[k.Value] && !inRateLimit:
				return invalid(file, k.Line, fmt.Sprintf("%q belongs under a rate_limit", k.Value))
			case !envoyKeys[k.Value] && !extensionKeys[k.Value]:
				return invalid(file, k.Line, fmt.Sprintf("unknown key %q", k.Value))
			}
			if err := checkKeys(file, v, k.Value == "rate_limit"); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for _, e := range n.Content {
			if e.Kind != yaml.MappingNode {
				return invalid(file, e.Line, "a list holds something other than a mapping")
			}
			if err := checkKeys(file, e, inRateLimit); err != nil {
				return err
			}
		}
	case yaml.ScalarNode, yaml.AliasNode:
	default:
		return invalid(file, n.Line, "unexpected YAML node")
	}
	return nil
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
	Algorithm string `yaml:"algorithm"`
	Window    string `yaml:"window"`
	Burst     uint32 `yaml:"burst"`
	Line      int    `yaml:"-"`
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
