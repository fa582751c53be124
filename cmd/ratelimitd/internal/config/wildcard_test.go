package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The wildcards of envoyproxy/ratelimit's master (test/config/wildcard.yaml
// there): a '*' anywhere in a value, several in one, matched against the
// entry's key_value in file order.
const wildcards = `domain: d
descriptors:
  - key: path
    value: /api/*/action
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: multi
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: mid
    value: bar*b
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 20}
`

func TestAWildcardMayStandAnywhereInAValue(t *testing.T) {
	c, err := Parse("w.yaml", []byte(wildcards))
	require.NoError(t, err)
	for _, tc := range []struct {
		key, value string
		rule       string // "" for none
		shared     string
	}{
		{"path", "/api/users/action", "d.path_/api/*/action", ""},
		{"path", "/api/action", "d.path_/api/*", ""}, // the '*' needs its two slashes around it
		{"path", "/api//action", "d.path_/api/*/action", ""},
		{"path", "/api/users/list", "d.path_/api/*", ""},
		{"path", "/web/users/action", "", ""},
		{"multi", "foo1bar2baz", "d.multi_foo*bar*baz", ""},
		{"multi", "foobarbaz", "d.multi_foo*bar*baz", ""},
		{"multi", "foobazbar", "", ""},
		{"multi", "foo-baz-bar-baz", "d.multi_foo*bar*baz", ""},
		{"mid", "barb", "d.mid_bar*b", "bar*b"},
		{"mid", "bar-xyz-b", "d.mid_bar*b", "bar*b"},
		{"mid", "bar", "", ""}, // shorter than the pattern's fixed bytes
	} {
		r, shared := c.Match("d", []Entry{{Key: tc.key, Value: tc.value}})
		if tc.rule == "" {
			assert.Nil(t, r, "%s=%s", tc.key, tc.value)
			continue
		}
		if assert.NotNil(t, r, "%s=%s", tc.key, tc.value) {
			assert.Equal(t, tc.rule, r.FullKey, "%s=%s", tc.key, tc.value)
		}
		if tc.shared == "" {
			assert.Nil(t, shared, "%s=%s", tc.key, tc.value)
		} else {
			assert.Equal(t, []string{tc.shared}, shared, "%s=%s: share_threshold on a mid-value wildcard", tc.key, tc.value)
		}
	}
}

func TestMetadataIsReadAsAMappingOfAnything(t *testing.T) {
	c, err := Parse("m.yaml", []byte(`domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 20}
    metadata:
      service_with_quota:
        name: service_2
        tiers: [1, 2.5, true, null]
        1: one
        since: 2001-12-14
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 20}
`))
	require.NoError(t, err)
	r, _ := c.Match("d", []Entry{{Key: "k", Value: "v"}})
	require.NotNil(t, r)
	require.NotNil(t, r.Metadata)
	assert.Equal(t, map[string]any{"service_with_quota": map[string]any{
		"name": "service_2", "tiers": []any{1.0, 2.5, true, nil}, "1": "one", "since": "2001-12-14",
	}}, r.Metadata.AsMap())
	r, _ = c.Match("d", []Entry{{Key: "plain"}})
	require.NotNil(t, r)
	assert.Nil(t, r.Metadata)

	_, err = Parse("m.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    metadata: text\n"))
	assert.ErrorIs(t, err, ErrInvalid, "metadata that is not a mapping")
	assert.ErrorContains(t, err, "m.yaml:3: metadata is a string, not a mapping")
}

// unit: year (365 days, as envoyproxy/ratelimit counts it) is a fixed
// window's; the other algorithms stop at ratelimit.MaxWindow.
func TestAYearIsAFixedWindowsUnit(t *testing.T) {
	c, err := Parse("y.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1000}\n"))
	require.NoError(t, err)
	r, _ := c.Match("d", []Entry{{Key: "k", Value: "v"}})
	require.NotNil(t, r)
	assert.Equal(t, Year, r.Unit)
	assert.Equal(t, 365*24*time.Hour, r.Policy.Window)
	_, err = Parse("y.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 10, algorithm: sliding}\n"))
	assert.ErrorIs(t, err, ErrInvalid, "a year-long log")
	o, err := Override("o", 5, Year)
	require.NoError(t, err, "a request's yearly override")
	assert.Equal(t, 365*24*time.Hour, o.Policy.Window)
}

// also: several limits on one descriptor (10 a second and 1,000 a day),
// each a rule of its own limit and the rest of its parent's.
func TestAlsoGivesADescriptorSeveralLimits(t *testing.T) {
	c, err := Parse("a.yaml", []byte(`domain: d
descriptors:
  - key: user
    shadow_mode: true
    rate_limit:
      name: per-user
      unit: second
      requests_per_unit: 10
      also:
        - {unit: day, requests_per_unit: 1000}
        - {window: 90s, requests_per_unit: 50, algorithm: sliding}
`))
	require.NoError(t, err)
	r, _ := c.Match("d", []Entry{{Key: "user", Value: "u"}})
	require.NotNil(t, r)
	require.Len(t, r.Also, 2)
	assert.Equal(t, "d.user#1", r.Also[0].FullKey)
	assert.Equal(t, [3]any{uint32(1000), Day, "per-user"}, [3]any{r.Also[0].RequestsPerUnit, r.Also[0].Unit, r.Also[0].Name})
	assert.True(t, r.Also[1].Shadow, "the parent's modes")
	assert.Equal(t, 90*time.Second, r.Also[1].Policy.Window)
	assert.Len(t, c.Rules(), 3)

	for _, bad := range []string{
		"domain: d\ndescriptors:\n  - key: k\n    also: [{unit: day, requests_per_unit: 1}]\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, also: [{unit: fortnight, requests_per_unit: 1}]}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, also: [{unit: day, requests_per_unit: 1}]}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, also: [{unit: day, requests_per_unit: 1, name: x}]}\n",
	} {
		_, err := Parse("a.yaml", []byte(bad))
		assert.ErrorIs(t, err, ErrInvalid, bad)
	}
}
