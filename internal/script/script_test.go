package script

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
)

// A panic of the client comes back as an error wrapping ErrStore.
func TestRecoverTurnsAPanicIntoAStoreError(t *testing.T) {
	err := func() (err error) {
		defer Recover("ratelimit/test", &err)
		panic("multi key command with different key slots are not allowed")
	}()
	require.True(t, errors.Is(err, ratelimit.ErrStore), "%v", err)
	require.ErrorContains(t, err, "ratelimit/test: the client panicked: multi key command")
}
