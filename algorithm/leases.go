package algorithm

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// Leases are the permits of one key held at once (an in-flight limit): each
// a lease until a time, under a Rate whose Limit is the permits and whose
// Window is how long a lease lasts unless renewed. A holder that stops
// renewing (it crashed) has its permit back when its lease ends. The zero
// value holds none. It is not safe for concurrent use; the store guards it.
//
// Its rules, beside the package's (a key's time never goes back: the time
// of its latest acquisition, the latest lease's end less Window):
//   - Acquire takes a permit as id when one is free (fewer leases not ended
//     by now than Limit), until now + Window; an id already held is renewed
//     instead, whatever is free. A denial records nothing; its RetryAfter
//     is the time until a lease ends, should none be renewed.
//   - Release gives id's permit back; an id not held (released already, or
//     ended) changes nothing.
//   - An Outcome's Count is the permits held; ResetAt when the first lease
//     ends (now when none is held).
type Leases struct{ held []Lease }

// Lease is one holder's permit: its id, and when its lease ends.
type Lease struct{ ID, Until int64 }

// MaxPermitID bounds a permit's id: ids are in [1, MaxPermitID], exact as a
// server script's number.
const MaxPermitID = MaxStored

// Acquire takes a permit as id at now, or renews id's: see Leases.
func (s *Leases) Acquire(now int64, r Rate, id int64) (out Outcome, e Effect) {
	now = s.keyTime(now, r)
	changed := s.prune(now)
	if i := s.find(id); i >= 0 {
		s.held[i].Until = now + r.Window
		s.peekTo(now, r, 0, &out)
		return out, Effect{Life: s.Life(now, r), Changed: true}
	}
	if s.peekTo(now, r, 1, &out); !out.Allowed() {
		return out, Effect{Changed: changed}
	}
	s.held = append(s.held, Lease{ID: id, Until: now + r.Window})
	s.peekTo(now, r, 0, &out)
	return out, Effect{Life: s.Life(now, r), Changed: true}
}

// Release gives id's permit back at now: see Leases. Its Outcome is a
// Peek of 1 afterwards.
func (s *Leases) Release(now int64, r Rate, id int64) (out Outcome, e Effect) {
	now = s.keyTime(now, r)
	changed := s.prune(now)
	if i := s.find(id); i >= 0 {
		s.held = slices.Delete(s.held, i, i+1)
		changed = true
	}
	s.peekTo(now, r, 1, &out)
	if !changed {
		return out, Effect{}
	}
	return out, Effect{Life: s.Life(now, r), Changed: true}
}

// Peek decides as Acquire of n permits (each a new id) would, and changes
// nothing.
func (s *Leases) Peek(now int64, r Rate, n int64) (out Outcome) {
	s.peekTo(s.keyTime(now, r), r, n, &out)
	return out
}

// peekTo writes to out what holds at now (the leases not ended), denying n
// permits more unless they fit (n = 0: the count alone, never denied).
func (s *Leases) peekTo(now int64, r Rate, n int64, out *Outcome) {
	ends := make([]int64, 0, len(s.held))
	for _, l := range s.held {
		if l.Until > now {
			ends = append(ends, l.Until)
		}
	}
	slices.Sort(ends)
	held := int64(len(ends))
	out.set(held, now, now)
	if held > 0 {
		out.ResetAt = ends[0]
	}
	if n > 0 && n > r.Limit-held {
		retry := r.Window // more than the limit: until one could have been renewed and ended
		if k := held + n - r.Limit; k <= held {
			retry = ends[k-1] - now // the k-th lease to end frees the last one needed
		}
		out.deny(retry)
	}
}

// prune drops the leases ended by now, and reports whether it dropped any.
func (s *Leases) prune(now int64) bool {
	kept := s.held[:0]
	for _, l := range s.held {
		if l.Until > now {
			kept = append(kept, l)
		}
	}
	dropped := len(kept) < len(s.held)
	clear(s.held[len(kept):])
	s.held = kept
	return dropped
}

func (s *Leases) find(id int64) int {
	for i, l := range s.held {
		if l.ID == id {
			return i
		}
	}
	return -1
}

// keyTime is the time a request at now is decided at: the latest
// acquisition's (the latest lease's end less the Window), when now is
// behind it by at most MaxSkew.
func (s *Leases) keyTime(now int64, r Rate) int64 {
	if len(s.held) == 0 {
		return now
	}
	latest := s.held[0].Until
	for _, l := range s.held[1:] {
		latest = max(latest, l.Until)
	}
	return keyTime(now, latest-r.Window)
}

// Len is the number of leases held (some may have ended until the next
// write prunes them).
func (s *Leases) Len() int { return len(s.held) }

// Empty reports whether no lease is held.
func (s *Leases) Empty() bool { return len(s.held) == 0 }

// Life is how long after now the state still matters: until its last lease
// ends.
func (s *Leases) Life(now int64, r Rate) int64 {
	last := now
	for _, l := range s.held {
		last = max(last, l.Until)
	}
	return last - now
}

// MarshalBinary implements encoding.BinaryMarshaler: the version byte, the
// number of leases, then each lease's id and end.
func (s Leases) MarshalBinary() ([]byte, error) {
	ints := make([]int64, 0, 1+2*len(s.held))
	ints = append(ints, int64(len(s.held)))
	for _, l := range s.held {
		ints = append(ints, l.ID, l.Until)
	}
	return appendInts(nil, ints...), nil
}

// UnmarshalBinary implements encoding.BinaryUnmarshaler.
func (s *Leases) UnmarshalBinary(data []byte) error {
	if len(data) == 0 || data[0] != stateVersion {
		return fmt.Errorf("%w: Leases: not version %d", ErrBadState, stateVersion)
	}
	rest, v := data[1:], make([]int64, 0, 8)
	for len(rest) > 0 {
		x, k := binary.Varint(rest)
		if k <= 0 || x < 0 || x > MaxStored {
			return fmt.Errorf("%w: Leases: field %d", ErrBadState, len(v))
		}
		v, rest = append(v, x), rest[k:]
	}
	if len(v) < 1 || int64(len(v)) != 1+2*v[0] {
		return fmt.Errorf("%w: Leases: %d fields", ErrBadState, len(v))
	}
	held := make([]Lease, 0, v[0])
	for i := int64(0); i < v[0]; i++ {
		l := Lease{ID: v[1+2*i], Until: v[2+2*i]}
		if l.ID < 1 {
			return fmt.Errorf("%w: Leases: lease %d has no id", ErrBadState, i)
		}
		held = append(held, l)
	}
	s.held = held
	return nil
}
