package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// LoadOption changes how Load reads a directory, as envoyproxy/ratelimit's
// settings do.
type LoadOption func(*loader)

// IgnoreDotfiles skips the files and directories whose names start with a
// dot (envoyproxy/ratelimit's RUNTIME_IGNOREDOTFILES; by default, as there,
// they are read).
func IgnoreDotfiles() LoadOption { return func(l *loader) { l.dotfiles = false } }

// MergeDomains merges the files that configure one domain
// (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG): a descriptor configured
// twice is still an error. Without it, a domain configured twice is one.
func MergeDomains() LoadOption { return func(l *loader) { l.merge = true } }

type loader struct{ dotfiles, merge bool }

func newLoader(opts []LoadOption) loader {
	l := loader{dotfiles: true}
	for _, o := range opts {
		o(&l)
	}
	return l
}

// Load reads path, a YAML file or a directory, as envoyproxy/ratelimit reads
// its runtime directory: every regular file below it, at any depth and of
// any name, in lexical order of path. Each file is one domain: its first
// YAML document (a file's later documents are not read, as there). A
// directory holding no file is a configuration of no domain: every domain
// is unknown.
func Load(path string, opts ...LoadOption) (*Config, error) {
	l := newLoader(opts)
	files, err := Files(path, opts...)
	if err != nil {
		return nil, err
	}
	c := &Config{domains: map[string]*node{}}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if err := c.add(f, data, l.merge); err != nil {
			return nil, err
		}
		c.Files = append(c.Files, f)
	}
	return c, nil
}

// Files are the files Load reads for path, in order. A path that does not
// exist is an error wrapping ErrInvalid and fs.ErrNotExist.
func Files(path string, opts ...LoadOption) ([]string, error) {
	l := newLoader(opts)
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	var files []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case p == path:
			return nil
		case !l.dotfiles && strings.HasPrefix(d.Name(), "."):
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		case d.IsDir():
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 { // a link to a file is read, one to a directory is not followed
			if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
				return nil
			}
		} else if !d.Type().IsRegular() {
			return nil
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return files, nil
}

// Empty is a configuration of no domain: every domain is unknown.
func Empty() *Config { return &Config{domains: map[string]*node{}} }

// Parse loads one file's content; name is used in error messages.
func Parse(name string, data []byte) (*Config, error) {
	c := &Config{domains: map[string]*node{}, Files: []string{name}}
	if err := c.add(name, data, false); err != nil {
		return nil, err
	}
	return c, nil
}

// add loads one file: its first document, a domain. With merge, a domain
// already loaded gains its descriptors.
func (c *Config) add(file string, data []byte, merge bool) error {
	var doc yaml.Node
	err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc)
	switch {
	case errors.Is(err, io.EOF):
		return invalid(file, 0, "the file holds no domain")
	case err != nil:
		return fmt.Errorf("%w: %s: %v", ErrInvalid, file, err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	lastKeyWins(root)
	if err := checkKeys(file, root, false); err != nil {
		return err
	}
	var y yamlRoot
	if err := root.Decode(&y); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, file, err)
	}
	if y.Domain == "" {
		return invalid(file, root.Line, "the domain is empty or missing")
	}
	n, dup := c.domains[y.Domain]
	switch {
	case dup && !merge:
		return invalid(file, root.Line, fmt.Sprintf("domain %q is configured twice", y.Domain))
	case !dup:
		n = newNode(len(y.Descriptors))
	}
	b := builder{file: file, domain: y.Domain}
	if err := b.fill(n, y.Domain, y.Descriptors); err != nil {
		return err
	}
	c.domains[y.Domain] = n
	return nil
}

// lastKeyWins drops, in every mapping below n, a key's earlier values when
// the key is given again, as envoyproxy/ratelimit's YAML reader keeps the
// last (the one this package uses refuses such a mapping).
func lastKeyWins(n *yaml.Node) {
	if n.Kind == yaml.MappingNode {
		last := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Kind == yaml.ScalarNode && k.Value != "<<" {
				last[k.Tag+"\x00"+k.Value] = i
			}
		}
		if len(last)*2 < len(n.Content) {
			kept := n.Content[:0:0]
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				if k.Kind == yaml.ScalarNode && k.Value != "<<" && last[k.Tag+"\x00"+k.Value] != i {
					continue
				}
				kept = append(kept, n.Content[i], n.Content[i+1])
			}
			n.Content = kept
		}
	}
	for _, c := range n.Content {
		lastKeyWins(c)
	}
}
