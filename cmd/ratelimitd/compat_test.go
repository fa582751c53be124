package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
)

// envoyRatelimit is the directory of envoyproxy/ratelimit's module at the
// version bench/go.mod pins, fetched by the Go module tool.
func envoyRatelimit(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/envoyproxy/ratelimit")
	cmd.Dir = "bench"
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	var mod struct{ Dir, Error string }
	if err == nil {
		err = json.Unmarshal(out, &mod)
	}
	if err != nil || mod.Error != "" || mod.Dir == "" {
		msg := "cannot fetch envoyproxy/ratelimit's module: %v %s"
		if os.Getenv("CI") == "true" {
			t.Fatalf(msg, err, mod.Error)
		}
		t.Skipf(msg, err, mod.Error)
	}
	return mod.Dir
}

// TestEnvoysOwnConfigsLoadAndItsBadOnesDoNot: every configuration file of
// envoyproxy/ratelimit's repository that it accepts loads unchanged, and
// every one its tests expect it to reject is rejected.
func TestEnvoysOwnConfigsLoadAndItsBadOnesDoNot(t *testing.T) {
	dir := envoyRatelimit(t)
	bad := map[string]bool{
		"bad_limit_unit.yaml": true, "bad_yaml.yaml": true, "duplicate_key.yaml": true, "empty_domain.yaml": true,
		"empty_key.yaml": true, "misspelled_key.yaml": true, "misspelled_key2.yaml": true, "non_map_list.yaml": true,
		"non_string_key.yaml": true, "replaces_empty.yaml": true, "replaces_self.yaml": true, "unlimited_with_unit.yaml": true,
	}
	files, err := filepath.Glob(filepath.Join(dir, "test", "config", "*.yaml"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 19, "the pinned version has 19")
	for _, f := range files {
		_, err := config.Load(f)
		if bad[filepath.Base(f)] {
			assert.ErrorIs(t, err, config.ErrInvalid, f)
		} else {
			assert.NoError(t, err, f)
		}
	}
	c, err := config.Load(filepath.Join(dir, "examples", "ratelimit", "config"))
	require.NoError(t, err)
	assert.Equal(t, []string{"mongo_cps", "rl"}, c.Domains())
	_, err = config.Load(filepath.Join(dir, "test", "config"))
	assert.ErrorIs(t, err, config.ErrInvalid, "a directory with its duplicate domains, which it rejects too without MERGE_DOMAIN_CONFIG")
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
	dir := envoyRatelimit(t)
	d := start(t, "-config", filepath.Join(dir, "examples", "ratelimit", "config"))
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
}
