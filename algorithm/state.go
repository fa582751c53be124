package algorithm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrBadState is wrapped by the error of UnmarshalBinary for bytes that are
// no state of that type (or of a newer version), or that hold a number no
// decision writes (see MaxStored); the state is then left as it was. Saved
// bytes are distrusted, as a row may have been written by hand, by a bug
// elsewhere or by a botched migration: a store that meets ErrBadState
// decides on a fresh state (the zero value) and saves that, so the row
// heals on its next write and never admits more than a fresh key would.
var ErrBadState = errors.New("ratelimit/algorithm: bad state")

// MaxStored bounds every number a saved state holds: each time, count,
// level, unit, drain and cost is an integer in [0, MaxStored] (a cost at
// least 1), as every decision within a ratelimit.Policy's bounds writes;
// and a Log's costs sum to MaxStored at most. Within it no arithmetic of
// the algorithms overflows.
const MaxStored = 1 << 53

// stateVersion is the first byte of every saved state.
const stateVersion = 1

// MarshalBinary implements encoding.BinaryMarshaler.
func (f Fixed) MarshalBinary() ([]byte, error) {
	return appendInts(nil, boolInt(f.started), f.start, f.count, f.aligned), nil
}

// UnmarshalBinary implements encoding.BinaryUnmarshaler.
func (f *Fixed) UnmarshalBinary(data []byte) error {
	v, err := readInts(data, 4, "Fixed")
	if err != nil {
		return err
	}
	if v[0] > 1 {
		return fmt.Errorf("%w: Fixed: started %d", ErrBadState, v[0])
	}
	*f = Fixed{started: v[0] != 0, start: v[1], count: v[2], aligned: v[3]}
	return nil
}

// MarshalBinary implements encoding.BinaryMarshaler.
func (c SlidingCounter) MarshalBinary() ([]byte, error) {
	return appendInts(nil, boolInt(c.started), c.start, c.prev, c.cur), nil
}

// UnmarshalBinary implements encoding.BinaryUnmarshaler.
func (c *SlidingCounter) UnmarshalBinary(data []byte) error {
	v, err := readInts(data, 4, "SlidingCounter")
	if err != nil {
		return err
	}
	if v[0] > 1 {
		return fmt.Errorf("%w: SlidingCounter: started %d", ErrBadState, v[0])
	}
	*c = SlidingCounter{started: v[0] != 0, start: v[1], prev: v[2], cur: v[3]}
	return nil
}

// MarshalBinary implements encoding.BinaryMarshaler.
func (b Bucket) MarshalBinary() ([]byte, error) {
	return appendInts(nil, b.at, b.level, b.unit, b.drain), nil
}

// UnmarshalBinary implements encoding.BinaryUnmarshaler.
func (b *Bucket) UnmarshalBinary(data []byte) error {
	v, err := readInts(data, 4, "Bucket")
	if err != nil {
		return err
	}
	if v[1] > 0 && (v[2] == 0 || v[3] == 0) {
		return fmt.Errorf("%w: Bucket: level %d under unit %d and drain %d", ErrBadState, v[1], v[2], v[3])
	}
	*b = Bucket{at: v[0], level: v[1], unit: v[2], drain: v[3]}
	return nil
}

// MarshalBinary implements encoding.BinaryMarshaler: the entries, oldest
// first, each its time (the first in full, then from the one before) and
// its cost.
func (l Log) MarshalBinary() ([]byte, error) {
	e := l.buf[l.head:]
	ints := make([]int64, 0, 1+2*l.n)
	ints = append(ints, int64(l.n))
	prev := int64(0)
	for i := 0; i < len(e); {
		var x Entry
		x, i = entryAt(e, i)
		ints = append(ints, x.At-prev, x.Cost)
		prev = x.At
	}
	return appendInts(nil, ints...), nil
}

// UnmarshalBinary implements encoding.BinaryUnmarshaler.
func (l *Log) UnmarshalBinary(data []byte) error {
	if len(data) == 0 || data[0] != stateVersion {
		return fmt.Errorf("%w: Log: not version %d", ErrBadState, stateVersion)
	}
	rest := data[1:]
	n, k := binary.Varint(rest)
	if k <= 0 || n < 0 || n > int64(len(rest)) { // an entry takes two bytes at least
		return fmt.Errorf("%w: Log: entry count", ErrBadState)
	}
	rest = rest[k:]
	e := make([]int64, 0, n)
	total, at := int64(0), int64(0)
	for i := int64(0); i < n; i++ {
		delta, k1 := binary.Varint(rest)
		if k1 <= 0 {
			return fmt.Errorf("%w: Log: entry %d", ErrBadState, i)
		}
		cost, k2 := binary.Varint(rest[k1:])
		if k2 <= 0 || cost < 1 || cost > MaxStored || delta < 0 || delta > MaxStored-at || total > MaxStored-cost {
			return fmt.Errorf("%w: Log: entry %d", ErrBadState, i) // back in time, or beyond MaxStored
		}
		rest = rest[k1+k2:]
		at += delta
		if e = append(e, at); cost != 1 {
			e = append(e, -cost)
		}
		total += cost
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: Log: %d bytes past the entries", ErrBadState, len(rest))
	}
	*l = Log{buf: e, n: int(n), total: total}
	return nil
}

func appendInts(b []byte, v ...int64) []byte {
	b = append(b, stateVersion)
	for _, x := range v {
		b = binary.AppendVarint(b, x)
	}
	return b
}

// readInts reads the n integers of a saved state of the type named what.
func readInts(data []byte, n int, what string) ([]int64, error) {
	if len(data) == 0 || data[0] != stateVersion {
		return nil, fmt.Errorf("%w: %s: not version %d", ErrBadState, what, stateVersion)
	}
	v, rest := make([]int64, n), data[1:]
	for i := range v {
		x, k := binary.Varint(rest)
		if k <= 0 {
			return nil, fmt.Errorf("%w: %s: field %d", ErrBadState, what, i)
		}
		if x < 0 || x > MaxStored {
			return nil, fmt.Errorf("%w: %s: field %d holds %d, outside [0, MaxStored]", ErrBadState, what, i, x)
		}
		v[i], rest = x, rest[k:]
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %s: %d bytes past its fields", ErrBadState, what, len(rest))
	}
	return v, nil
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
