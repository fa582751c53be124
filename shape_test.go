package ratelimit_test

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
)

// The user's vocabulary is the contract's: one definition of each name, so
// nothing converts between them.
func TestTheAlgorithmIsTheContractsOwnType(t *testing.T) {
	var alg backend.Algorithm = ratelimit.GCRA // compiles only without a conversion
	require.Equal(t, backend.GCRA, alg)
	require.Equal(t, reflect.TypeFor[backend.Algorithm](), reflect.TypeFor[ratelimit.Algorithm]())
	require.Equal(t, backend.Algorithms(), backend.Algorithms())
	require.Same(t, backend.ErrInvalidPolicy, ratelimit.ErrInvalidPolicy)
	require.Same(t, backend.ErrStore, ratelimit.ErrStore)
}
