package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
)

const tree = `domain: api
descriptors:
  - key: user                  # any user
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: path
        value: /upload
        rate_limit: {window: 90s, requests_per_unit: 2, algorithm: sliding}
  - key: user
    value: admin               # one user, its own limit
    rate_limit: {unit: second, requests_per_unit: 1000, name: admin, replaces: [{name: other}]}
  - key: user
    value: banned
  - key: files
    value: public/*            # a wildcard, every match its own counter
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: files
    value: shared/*            # a wildcard whose matches share a counter
    share_threshold: true
    rate_limit: {unit: day, requests_per_unit: 5, algorithm: gcra, burst: 2}
  - key: tier
    value: free
    descriptors:
      - key: user
        rate_limit: {unit: week, requests_per_unit: 7, algorithm: counter}
        shadow_mode: true
  - key: internal
    rate_limit: {unlimited: true}
  - key: closed
    rate_limit: {unit: month, requests_per_unit: 0}
`

func TestMatchWalksTheTreeAsEnvoysServiceDoes(t *testing.T) {
	c, err := Parse("tree.yaml", []byte(tree))
	require.NoError(t, err)
	e := func(kv ...string) []Entry {
		var es []Entry
		for i := 0; i < len(kv); i += 2 {
			es = append(es, Entry{Key: kv[i], Value: kv[i+1]})
		}
		return es
	}
	for _, tc := range []struct {
		name    string
		entries []Entry
		rule    string // FullKey, "" for none
		shared  []string
	}{
		{"a value-less rule matches any value", e("user", "alice"), "api.user", nil},
		{"a key and value beat the value-less rule", e("user", "admin"), "api.user_admin", nil},
		{"a value without a rule is not limited", e("user", "banned"), "", nil},
		{"a nested rule applies at its depth", e("user", "bob", "path", "/upload"), "api.user.path_/upload", nil},
		{"a nested value not configured matches nothing", e("user", "bob", "path", "/other"), "", nil},
		{"a descriptor deeper than the tree matches nothing", e("user", "bob", "path", "/upload", "x", "y"), "", nil},
		{"a level without a rule limits nothing", e("tier", "free"), "", nil},
		{"a rule below a level without one", e("tier", "free", "user", "carol"), "api.tier_free.user", nil},
		{"a wildcard matches by prefix", e("files", "public/a.txt"), "api.files_public/*", nil},
		{"share_threshold counts matches under the pattern", e("files", "shared/b"), "api.files_shared/*", []string{"shared/*"}},
		{"a value outside the wildcards matches nothing", e("files", "private/c"), "", nil},
		{"an unknown key matches nothing", e("tenant", "x"), "", nil},
		{"an unlimited rule", e("internal", "svc"), "api.internal", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, shared := c.Match("api", tc.entries)
			if tc.rule == "" {
				assert.Nil(t, r)
				return
			}
			require.NotNil(t, r)
			assert.Equal(t, tc.rule, r.FullKey)
			assert.Equal(t, tc.shared, shared)
		})
	}
	r, _ := c.Match("other", e("user", "alice"))
	assert.Nil(t, r, "an unknown domain matches nothing")
}

func TestRulesCarryTheirPolicy(t *testing.T) {
	c, err := Parse("tree.yaml", []byte(tree))
	require.NoError(t, err)
	rule := func(kv ...string) *Rule {
		var es []Entry
		for i := 0; i < len(kv); i += 2 {
			es = append(es, Entry{Key: kv[i], Value: kv[i+1]})
		}
		r, _ := c.Match("api", es)
		require.NotNil(t, r, kv)
		return r
	}
	fixed := rule("user", "x")
	assert.Equal(t, ratelimit.NewPolicy(ratelimit.FixedWindow, 100, time.Minute), fixed.Policy, "fixed windows of the unit by default, as envoyproxy/ratelimit counts")
	assert.Equal(t, Minute, fixed.Unit)
	upload := rule("user", "x", "path", "/upload")
	assert.Equal(t, ratelimit.NewPolicy(ratelimit.SlidingWindow, 2, 90*time.Second), upload.Policy)
	assert.Equal(t, Unknown, upload.Unit, "a window that is no unit")
	admin := rule("user", "admin")
	assert.Equal(t, "admin", admin.Name)
	assert.Equal(t, []string{"other"}, admin.Replaces)
	assert.Equal(t, ratelimit.TokenBucket(5, 24*time.Hour, 2), rule("files", "shared/x").Policy)
	free := rule("tier", "free", "user", "x")
	assert.True(t, free.Shadow)
	assert.Equal(t, ratelimit.NewPolicy(ratelimit.SlidingWindowCounter, 7, 7*24*time.Hour), free.Policy)
	assert.True(t, rule("internal", "x").Unlimited)
	closed := rule("closed", "x")
	assert.True(t, closed.DeniesAll())
	assert.Equal(t, 30*24*time.Hour, closed.Window, "a month is 30 days, as in envoyproxy/ratelimit")
}

// TestABadFileSaysWhereAndWhy: each problem is rejected with the file, the
// line and what is wrong, and nothing else loads.
func TestABadFileSaysWhereAndWhy(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown key", "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {unit: second}\n", `f.yaml:4: unknown key "ratelimit"`},
		{"misspelt field", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n", `f.yaml:6: unknown key "requestsperunit"`},
		{"extension outside a rate_limit", "domain: d\ndescriptors:\n  - key: k\n    algorithm: gcra\n", `f.yaml:4: "algorithm" belongs under a rate_limit`},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n", `f.yaml:5: invalid rate limit unit "fortnight"`},
		{"no unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 5}\n", `f.yaml:4: a rate_limit needs a unit`},
		{"unlimited with a unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n", `f.yaml:4: an unlimited rule has no unit`},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: a, replaces: [{name: a}], unit: second, requests_per_unit: 1}\n", `f.yaml:4: rule "a" replaces itself`},
		{"empty replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: a, replaces: [{name: }], unit: second, requests_per_unit: 1}\n", `f.yaml:4: a replaces entry has no name`},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", `f.yaml:3: a descriptor has an empty key`},
		{"duplicate", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n", `f.yaml:5: duplicate descriptor "d.k_v"`},
		{"no domain", "descriptors:\n  - key: k\n", `f.yaml:1: the domain is empty or missing`},
		{"share without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", `f.yaml:3: share_threshold needs a wildcard value`},
		{"unknown algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky}\n", `f.yaml:4: unknown algorithm "leaky"`},
		{"burst without gcra", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 3}\n", `f.yaml:4: burst applies to algorithm gcra only`},
		{"unit and window disagree", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, window: 2s, requests_per_unit: 1}\n", `f.yaml:4: unit second and window 2s disagree`},
		{"bad window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {window: soon, requests_per_unit: 1}\n", `f.yaml:4: window "soon"`},
		{"a log too long", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 4000000000, algorithm: sliding}\n", `f.yaml:4: ` + ratelimit.ErrInvalidPolicy.Error()},
		{"not a mapping", "domain: d\ndescriptors:\n  - a\n  - b\n", `f.yaml:3: a list holds something other than a mapping`},
		{"key not a string", "0.25: d\ndescriptors: []\n", `f.yaml:1: key "0.25" is not a string`},
		{"a type error", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: many}\n", `f.yaml: yaml: unmarshal errors:
  line 4: cannot unmarshal !!str ` + "`many`"},
		{"not YAML", "'''\n", `f.yaml: yaml: `},
		{"a fraction where upstream wants a whole number", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10.0}\n", `f.yaml:4: 10.0 is a number with a fraction`},
		{"a fraction for a value", "domain: d\ndescriptors:\n  - key: k\n    value: 1.10\n", `f.yaml:4: 1.10 is a number with a fraction: quote it`},
		{"empty", "", `f.yaml: the file holds no domain`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("f.yaml", []byte(tc.yaml))
			require.Error(t, err)
			assert.Nil(t, c)
			assert.True(t, errors.Is(err, ErrInvalid), err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// A directory is read as envoyproxy/ratelimit reads its runtime directory:
// every file below it, of any name and at any depth, each file's first
// document; empty, it configures no domain.
func TestADirectoryLoadsEveryFileBelowItAsUpstreamDoes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	c, err := Load(dir)
	require.NoError(t, err, "an empty directory")
	assert.Empty(t, c.Domains())

	write("a.yaml", "domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	write("b.yml", "domain: b\n---\ndomain: c\n---\n: not: yaml: [\n")
	write("sub/dir/limits", "domain: d\n")
	write(".hidden.yaml", "domain: h\n")
	c, err = Load(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "d", "h"}, c.Domains(), "the first document of each file, any name, any depth, dotfiles too")
	assert.Len(t, c.Files, 4)
	c, err = Load(dir, IgnoreDotfiles())
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "d"}, c.Domains(), "RUNTIME_IGNOREDOTFILES")

	write("e.yaml", "domain: a\ndescriptors: [{key: other, rate_limit: {unit: minute, requests_per_unit: 2}}]\n")
	_, err = Load(dir)
	require.ErrorIs(t, err, ErrInvalid)
	assert.True(t, strings.Contains(err.Error(), "e.yaml:1: domain \"a\" is configured twice"), err)
	c, err = Load(dir, MergeDomains())
	require.NoError(t, err, "MERGE_DOMAIN_CONFIG")
	r, _ := c.Match("a", []Entry{{Key: "other", Value: "x"}})
	require.NotNil(t, r)
	assert.Equal(t, uint32(2), r.RequestsPerUnit, "the second file's descriptors join the domain")
	r, _ = c.Match("a", []Entry{{Key: "k", Value: "x"}})
	assert.NotNil(t, r, "and the first's stay")

	write("f.yaml", "domain: a\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 3}}]\n")
	_, err = Load(dir, MergeDomains())
	assert.ErrorContains(t, err, `duplicate descriptor "a.k"`, "merged, a descriptor given twice is still an error")

	_, err = Load(filepath.Join(dir, "missing.yaml"))
	assert.ErrorIs(t, err, ErrInvalid)
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

// YAML as envoyproxy/ratelimit's reader takes it: merge keys ("<<") bring
// their keys, checked like the others, and a key given twice keeps its
// last value.
func TestMergeKeysAndRepeatedKeysReadAsUpstreamReadsThem(t *testing.T) {
	c, err := Parse("m.yaml", []byte(`domain: d
limits:
  - &minute {unit: minute, requests_per_unit: 5}
descriptors:
  - key: a
    rate_limit:
      <<: *minute
      requests_per_unit: 7
  - key: b
    rate_limit: *minute
  - key: c
    key: c2
    rate_limit: {unit: hour, requests_per_unit: 1, requests_per_unit: 2}
`))
	require.ErrorContains(t, err, `unknown key "limits"`, "an anchor's home still has to be a known key")
	c, err = Parse("m.yaml", []byte(`domain: d
descriptors:
  - key: a
    rate_limit: &minute
      unit: minute
      requests_per_unit: 5
  - key: b
    rate_limit:
      <<: *minute
      requests_per_unit: 7
  - key: c
    key: c2
    rate_limit: {unit: hour, requests_per_unit: 1, requests_per_unit: 2}
`))
	require.NoError(t, err)
	r, _ := c.Match("d", []Entry{{Key: "b"}})
	require.NotNil(t, r)
	assert.Equal(t, [2]any{uint32(7), Minute}, [2]any{r.RequestsPerUnit, r.Unit}, "merged, then overridden")
	r, _ = c.Match("d", []Entry{{Key: "c2"}})
	require.NotNil(t, r, "the last key wins")
	assert.Equal(t, uint32(2), r.RequestsPerUnit)
	_, err = Parse("m.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: &l {unit: minute, requests_per_unit: 5, bogus: 1}\n  - key: b\n    rate_limit: {<<: *l}\n"))
	assert.ErrorContains(t, err, `unknown key "bogus"`)
}

func TestOverrideIsAFixedWindowOfTheUnit(t *testing.T) {
	r, err := Override("o", 7, Hour)
	require.NoError(t, err)
	assert.Equal(t, ratelimit.NewPolicy(ratelimit.FixedWindow, 7, time.Hour), r.Policy)
	_, err = Override("o", 7, Unknown)
	assert.ErrorIs(t, err, ErrInvalid)
	r, err = Override("o", 0, Second)
	require.NoError(t, err)
	assert.True(t, r.DeniesAll())
}
