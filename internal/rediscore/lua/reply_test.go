package lua

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/backend"
)

// packedOf is what common.lua's packed makes of five numbers: struct.pack's
// '<ddddd'.
func packedOf(nums ...float64) string {
	b := make([]byte, 0, 8*len(nums))
	for _, n := range nums {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(n))
	}
	return string(b)
}

// A packed reply reads as the table of the same numbers does, exactly to
// the largest time a store decides at.
func TestUnpackReadsWhatOutcomeReads(t *testing.T) {
	at := float64(backend.MaxMicros)
	for _, r := range [][replyLen]float64{
		{1, 3, at, 0, at - 1},              // an admission
		{0, 10, at, 250_000, at - 250_000}, // a denial
		{0, 10, 5, -3, 8},                  // a denial whose retry the server saw as past: at least 1µs
	} {
		got, err := Unpack(packedOf(r[:]...))
		require.NoError(t, err)
		want, err := Outcome([]int64{int64(r[0]), int64(r[1]), int64(r[2]), int64(r[3]), int64(r[4])})
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := Unpack(packedOf(refused, 4, 0, 0, 7))
	require.True(t, errors.Is(err, backend.ErrInvalidCost), "a refused refund: %v", err)
}

// A reply that is not five whole numbers is an error, never an Outcome.
func TestUnpackRefusesWhatIsNoneOfOurs(t *testing.T) {
	for name, reply := range map[string]string{
		"empty":      "",
		"four":       packedOf(1, 1, 1, 1),
		"six":        packedOf(1, 1, 1, 1, 1, 1),
		"a fraction": packedOf(1, 1.5, 1, 1, 1),
		"NaN":        packedOf(1, math.NaN(), 1, 1, 1),
		"infinity":   packedOf(1, 1, math.Inf(1), 1, 1),
		"too large":  packedOf(1, 1, 1, 1, 1<<63),
	} {
		_, err := Unpack(reply)
		require.Error(t, err, name)
	}
}

// Reading a reply allocates nothing: it is on every decision's path.
func TestUnpackAllocatesNothing(t *testing.T) {
	reply := packedOf(1, 3, 1_000_000, 0, 999_000)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := Unpack(reply); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}
