package rlqs

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
)

// A bucket id has no order: its entries match the domain's tree in the
// first order of their keys that the tree has (sorted first).
func TestABucketIdMatchesItsRuleInAnyOrder(t *testing.T) {
	cfg, err := config.Parse("m.yaml", []byte(`domain: d
descriptors:
  - key: user
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 7}
  - key: b
    descriptors:
      - key: a
        descriptors:
          - key: c
            rate_limit: {unit: second, requests_per_unit: 3}
  - key: open
    rate_limit: {unlimited: true}
`))
	require.NoError(t, err)
	r := match(cfg, "d", map[string]string{"path": "/x", "user": "u1"}) // sorted: path, user; the tree has user, path
	require.NotNil(t, r)
	require.EqualValues(t, 7, r.RequestsPerUnit)
	r = match(cfg, "d", map[string]string{"a": "1", "b": "2", "c": "3"}) // the third order of six
	require.NotNil(t, r)
	require.EqualValues(t, 3, r.RequestsPerUnit)
	require.True(t, match(cfg, "d", map[string]string{"open": "x"}).Unlimited)
	require.Nil(t, match(cfg, "d", map[string]string{"user": "u1"}), "a descriptor's rule sits at its last entry")
	require.Nil(t, match(cfg, "other", map[string]string{"user": "u1", "path": "/x"}), "another domain")
}

func TestBucketKeysNameOneIdEach(t *testing.T) {
	a := bucketKey("d", map[string]string{"a": "b:1", "c": "d"})
	b := bucketKey("d", map[string]string{"a": "b", "1:c": "d"})
	require.NotEqual(t, a, b)
	require.Equal(t, a, bucketKey("d", map[string]string{"c": "d", "a": "b:1"}), "the same id in another order")
	require.NotEqual(t, bucketKey("d1", map[string]string{"a": "b"}), bucketKey("d", map[string]string{"1a": "b"}))
}
