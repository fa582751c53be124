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
	// wildcards are the children whose value ends in '*', in file order.
	wildcards []Entry
	rule      *Rule
	// share is, for a share_threshold wildcard, the value every match is
	// counted under (the pattern itself, "files*").
	share string
}

// Match finds the rule for a request's descriptor in domain, walking the
// tree one entry at a time as envoyproxy/ratelimit does: at each level the
// entry's key and value if configured, else the first wildcard whose prefix
// the value has, else the key alone (a value-less rule matches any value).
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
			for _, w := range n.wildcards {
				if w.Key == e.Key && strings.HasPrefix(e.Value, w.Value[:len(w.Value)-1]) {
					next = n.children[w]
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

// children builds the node whose descriptors are ds; path is its full key.
func (b *builder) children(path string, ds []yamlDescriptor) (*node, error) {
	n := &node{children: make(map[Entry]*node, len(ds))}
	for i := range ds {
		d := &ds[i]
		if d.Key == "" {
			return nil, invalid(b.file, d.Line, "a descriptor has an empty key")
		}
		e := Entry{Key: d.Key, Value: d.Value}
		full := path + "." + d.Key
		if d.Value != "" {
			full += "_" + d.Value
		}
		if _, dup := n.children[e]; dup {
			return nil, invalid(b.file, d.Line, fmt.Sprintf("duplicate descriptor %q", full))
		}
		wildcard := strings.HasSuffix(d.Value, "*")
		if d.ShareThreshold && !wildcard {
			return nil, invalid(b.file, d.Line, fmt.Sprintf("share_threshold needs a wildcard value (ending in '*'), not %q", d.Value))
		}
		child, err := b.children(full, d.Descriptors)
		if err != nil {
			return nil, err
		}
		if d.RateLimit != nil {
			if child.rule, err = b.rule(full, d); err != nil {
				return nil, err
			}
		}
		if d.ShareThreshold {
			child.share = d.Value
		}
		if wildcard {
			n.wildcards = append(n.wildcards, e)
		}
		n.children[e] = child
	}
	return n, nil
}
