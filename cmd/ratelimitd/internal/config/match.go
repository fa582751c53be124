package config

import (
	"fmt"
	"strings"
)

// Entry is one key/value pair of a request's descriptor.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// node is one level of a domain's descriptor tree.
type node struct {
	// children by key and value; a value-less rule has value "".
	children map[Entry]*node
	// wildcards are the children whose key_value holds a '*', in file order.
	wildcards []wildcard
	rule      *Rule
	// share is, for a share_threshold wildcard, the value every match is
	// counted under (the pattern itself, "files*").
	share string
}

// Match finds the rule for a request's descriptor in domain, walking the
// tree one entry at a time as envoyproxy/ratelimit does: at each level the
// entry's key and value if configured, else the first wildcard (in file
// order) that the entry's key_value matches, each '*' standing for any run
// of bytes ("path_/api/*/action"), else the key alone (a value-less rule
// matches any value).
// The rule applies only when it sits at the descriptor's last entry; a
// descriptor that leaves the tree early, or goes deeper than it, matches
// nothing (not limited).
//
// shared, when not nil, holds for each entry the value its counter is kept
// under in place of the request's ("" where the request's own applies): a
// share_threshold wildcard makes all its matches share one counter.
func (c *Config) Match(domain string, entries []Entry) (rule *Rule, shared []string) {
	n := c.domains[domain]
	if n == nil {
		return nil, nil
	}
	for i, e := range entries {
		next := n.children[e]
		if next == nil {
			text := ""
			if len(n.wildcards) > 0 {
				text = e.Key + "_" + e.Value
			}
			for _, w := range n.wildcards {
				if w.matches(text) {
					next = n.children[w.entry]
					break
				}
			}
			if next != nil && next.share != "" {
				if shared == nil {
					shared = make([]string, len(entries))
				}
				shared[i] = next.share
			}
		}
		if next == nil {
			next = n.children[Entry{Key: e.Key}]
		}
		if next == nil {
			return nil, nil
		}
		if i == len(entries)-1 {
			return next.rule, shared
		}
		n = next
	}
	return nil, nil
}

// builder loads one domain's descriptors into its tree.
type builder struct {
	file, domain string
}

func newNode(size int) *node { return &node{children: make(map[Entry]*node, size)} }

// fill adds to n, the node whose full key is path, the descriptors ds: a
// descriptor n already holds (by key and value) is an error.
func (b *builder) fill(n *node, path string, ds []yamlDescriptor) error {
	for i := range ds {
		d := &ds[i]
		if d.Key == "" {
			return invalid(b.file, d.Line, "a descriptor has an empty key")
		}
		e := Entry{Key: d.Key, Value: d.Value}
		full := path + "." + d.Key
		if d.Value != "" {
			full += "_" + d.Value
		}
		if _, dup := n.children[e]; dup {
			return invalid(b.file, d.Line, fmt.Sprintf("duplicate descriptor %q", full))
		}
		wildcard := strings.Contains(d.Key, "*") || strings.Contains(d.Value, "*")
		if d.ShareThreshold && !wildcard {
			return invalid(b.file, d.Line, fmt.Sprintf("share_threshold needs a wildcard value (one holding a '*'), not %q", d.Value))
		}
		meta, err := b.metadata(d)
		if err != nil {
			return err
		}
		child := newNode(len(d.Descriptors))
		if err := b.fill(child, full, d.Descriptors); err != nil {
			return err
		}
		if d.RateLimit != nil {
			if child.rule, err = b.rule(full, d); err != nil {
				return err
			}
			child.rule.Metadata = meta
			for _, a := range child.rule.Also {
				a.Metadata = meta
			}
		}
		if d.ShareThreshold {
			child.share = d.Value
		}
		if wildcard {
			n.wildcards = append(n.wildcards, newWildcard(e))
		}
		n.children[e] = child
	}
	return nil
}
