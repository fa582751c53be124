package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
)

// upstream is envoyproxy/ratelimit's configuration files at the master
// commit testdata/upstream/README.md names.
const upstream = "testdata/upstream"

// TestEnvoysOwnConfigsLoadAndItsBadOnesDoNot: every configuration file of
// envoyproxy/ratelimit's master that it accepts loads unchanged, and every
// one its tests expect it to reject is rejected.
func TestEnvoysOwnConfigsLoadAndItsBadOnesDoNot(t *testing.T) {
	bad := map[string]bool{
		"bad_limit_unit.yaml": true, "bad_yaml.yaml": true, "duplicate_key.yaml": true, "empty_domain.yaml": true,
		"empty_key.yaml": true, "misspelled_key.yaml": true, "misspelled_key2.yaml": true, "non_map_list.yaml": true,
		"non_string_key.yaml": true, "replaces_empty.yaml": true, "replaces_self.yaml": true, "unlimited_with_unit.yaml": true,
	}
	files, err := filepath.Glob(filepath.Join(upstream, "test-config", "*.yaml"))
	require.NoError(t, err)
	require.Len(t, files, 20, "master has 20")
	for _, f := range files {
		_, err := config.Load(f)
		if bad[filepath.Base(f)] {
			assert.ErrorIs(t, err, config.ErrInvalid, f)
		} else {
			assert.NoError(t, err, f)
		}
	}
	c, err := config.Load(filepath.Join(upstream, "examples-config"))
	require.NoError(t, err, "its shipped example, descriptor metadata included")
	assert.Equal(t, []string{"mongo_cps", "rl"}, c.Domains())
	c, err = config.Load(filepath.Join(upstream, "integration-config"))
	require.NoError(t, err)
	assert.Equal(t, []string{"another", "basic", "share-threshold-test"}, c.Domains())
	_, err = config.Load(filepath.Join(upstream, "test-config"))
	assert.ErrorIs(t, err, config.ErrInvalid, "a directory with its duplicate domains, which it rejects too without MERGE_DOMAIN_CONFIG")

	merged := t.TempDir()
	for _, f := range []string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"} {
		data, err := os.ReadFile(filepath.Join(upstream, "test-config", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(merged, f), data, 0o644))
	}
	_, err = config.Load(merged, config.MergeDomains())
	assert.NoError(t, err, "MERGE_DOMAIN_CONFIG: two files, one domain")
	_, err = config.Load(merged)
	assert.ErrorIs(t, err, config.ErrInvalid, "without it, refused")
}

// TestEnvoysWildcardsMatchAsItsTestsSay: master's own expectations of
// test/config/wildcard.yaml.
func TestEnvoysWildcardsMatchAsItsTestsSay(t *testing.T) {
	c, err := config.Load(filepath.Join(upstream, "test-config", "wildcard.yaml"))
	require.NoError(t, err)
	for _, tc := range []struct {
		entries []string
		rule    string // "" for none
	}{
		{[]string{"noVal", "foo1"}, "test-domain.noVal"},
		{[]string{"wild", "foo1"}, "test-domain.wild_foo*"},
		{[]string{"nestedWild", "val1", "wild", "goo2"}, "test-domain.nestedWild_val1.wild_goo*"},
		{[]string{"wild", "bar"}, ""},
		{[]string{"noWild", "foo1"}, ""},
		{[]string{"midWild", "barab"}, "test-domain.midWild_bar*b"},
		{[]string{"midWild", "bar123b"}, "test-domain.midWild_bar*b"},
		{[]string{"midWild", "barb"}, "test-domain.midWild_bar*b"},
		{[]string{"midWild", "bara"}, ""},
		{[]string{"midWild", "xbarb"}, ""},
		{[]string{"multiWild", "foo123bar456baz"}, "test-domain.multiWild_foo*bar*baz"},
		{[]string{"multiWild", "foobarbaz"}, "test-domain.multiWild_foo*bar*baz"},
	} {
		var es []config.Entry
		for i := 0; i < len(tc.entries); i += 2 {
			es = append(es, config.Entry{Key: tc.entries[i], Value: tc.entries[i+1]})
		}
		r, _ := c.Match("test-domain", es)
		if tc.rule == "" {
			assert.Nil(t, r, "%v", tc.entries)
		} else if assert.NotNil(t, r, "%v", tc.entries) {
			assert.Equal(t, tc.rule, r.FullKey, "%v", tc.entries)
		}
	}
}

// step is one request of envoyproxy/ratelimit's integration scripts: a
// route of its example Envoy (which header becomes which descriptor), the
// headers, and whether the script asserts it passes.
type step struct {
	route   string
	headers string // "foo=a bar=b"
	ok      bool
}

// envoyRoutes are the rate_limits actions of its examples/envoy/proxy.yaml: each
// is a descriptor of those headers, sent only when the request has them all.
var envoyRoutes = map[string][][]string{
	"twoheader":  {{"foo", "bar"}, {"foo", "baz"}},
	"fourheader": {{"foo", "bar"}, {"source_cluster", "destination_cluster"}},
	"fiveheader": {{"foo", "bar"}, {"source_cluster", "destination_cluster"}, {"category"}},
	"unspec":     {{"unspec"}},
}

// TestEnvoysIntegrationScriptsDecideTheSame replays, over gRPC against
// the built binary and envoyproxy/ratelimit's example configuration, the
// requests of its integration-test scripts (replaces.sh,
// trigger-ratelimit.sh, trigger-shadow-mode-key.sh and
// value-included-in-stats-key-when-unspecified.sh), in their order, with
// the outcome each script asserts.
func TestEnvoysIntegrationScriptsDecideTheSame(t *testing.T) {
	d := start(t, "-config", filepath.Join(upstream, "examples-config"))
	s := func(route, headers string, ok bool) step { return step{route, headers, ok} }
	banned, override := "foo=bkthomps bar=banned", "foo=bkthomps bar=banned source_cluster=proxy destination_cluster="
	original := "foo=my_foo bar=bkthomps source_cluster=proxy destination_cluster="
	multi := "foo=my_foo bar=bkthomps source_cluster=proxy destination_cluster=fake category=account"
	script := []step{
		// replaces.sh: replaces raises a limit...
		s("twoheader", banned, false), s("fourheader", override+"mock", false),
		s("fourheader", override+"override", true), s("fourheader", override+"override", true), s("fourheader", override+"override", false),
		// ...leaves the original's counter alone...
		s("fourheader", original+"bkthomps", true), s("fourheader", original+"bkthomps", true), s("fourheader", original+"bkthomps", false),
		s("fourheader", original+"not_bkthomps", true), s("fourheader", original+"not_bkthomps", false), s("fourheader", original+"bkthomps", false),
		// ...and replaces several.
		s("fiveheader", multi, true), s("fiveheader", multi, true), s("fiveheader", multi, true), s("fiveheader", multi, true), s("fiveheader", multi, false),
		s("twoheader", "foo=foo_2 bar=bkthomps", true), s("twoheader", "foo=foo_2 bar=bkthomps", false),
		s("fourheader", "foo=foo_3 bar=bar_3 source_cluster=proxy destination_cluster=fake", true),
		s("fourheader", "foo=foo_3 bar=bar_3 source_cluster=proxy destination_cluster=fake", true),
		s("fourheader", "foo=foo_3 bar=bar_3 source_cluster=proxy destination_cluster=fake", false),
		s("fiveheader", multi, false),
		// trigger-ratelimit.sh: 3 per minute.
		s("twoheader", "foo=pelle baz=not-so-shady", true), s("twoheader", "foo=pelle baz=not-so-shady", true),
		s("twoheader", "foo=pelle baz=not-so-shady", true), s("twoheader", "foo=pelle baz=not-so-shady", false),
		// value-included-in-stats-key-when-unspecified.sh: 2 per minute.
		s("unspec", "unspec=unspecified_value", true), s("unspec", "unspec=unspecified_value", true), s("unspec", "unspec=unspecified_value", false),
	}
	// trigger-shadow-mode-key.sh: shadow_mode answers OK past the limit.
	for i := 0; i < 6; i++ {
		script = append(script, s("twoheader", "foo=pelle baz=shady", true))
	}
	for i, st := range script {
		headers := map[string]string{}
		for _, kv := range strings.Fields(st.headers) {
			k, v, _ := strings.Cut(kv, "=")
			headers[k] = v
		}
		var descriptors [][]string
		for _, action := range envoyRoutes[st.route] {
			var entries []string
			for _, h := range action {
				if v, ok := headers[h]; ok {
					entries = append(entries, h, v)
				}
			}
			if len(entries) == 2*len(action) {
				descriptors = append(descriptors, entries)
			}
		}
		res, err := d.ask(context.Background(), "rl", descriptors...)
		require.NoError(t, err, "step %d", i)
		assert.Equal(t, st.ok, res.OverallCode == rlsv3.RateLimitResponse_OK, "step %d: %s %s", i, st.route, st.headers)
	}
	res, err := d.ask(context.Background(), "rl", []string{"foo", "pelle", "baz", "shady"})
	require.NoError(t, err)
	assert.Zero(t, res.Statuses[0].LimitRemaining, "the shadow limit says it is spent, as its script reads from the headers")
	_, metrics := d.get(t, "/metrics")
	assert.Contains(t, metrics, `ratelimitd_detailed_decisions_total{descriptor="rl.unspec_unspecified_value",result="over_limit",rule="rl.unspec"} 1`,
		"detailed_metric counts per value, as its script reads from the stats")
	assert.Contains(t, metrics, `ratelimit_decisions_total{dry_run="true",policy="rl.foo.baz_shady",result="denied",source="store"} 4`,
		"a shadow rule's denials are apart from those that denied a caller")
	assert.NotContains(t, metrics, `dry_run="false",policy="rl.foo.baz_shady",result="denied"`)
	assert.Contains(t, metrics, `ratelimit_service_rate_limit_shadow_mode{domain="rl",key1="foo",key2="baz_shady"} 4`, "and counted as upstream counts them")
}
