package lua

import (
	"fmt"
	"math"

	"github.com/ratelimit-go/ratelimit/backend"
)

// The scripts' replies: integers that become Outcomes. A call of one
// request answers them packed (common.lua's packed: Unpack); All answers a
// table of them (Outcomes).

// replyLen is the number of integers the script returns per request.
const replyLen = 5

// refused is the script's "allowed" for a refund of more than is in use.
const refused = 2

// Outcome reads one request's reply as integers (an item of All's table).
// A refused refund is an error wrapping backend.ErrInvalidCost.
func Outcome(reply []int64) (backend.Outcome, error) {
	if len(reply) != replyLen {
		return backend.Outcome{}, fmt.Errorf("unexpected script reply %v", reply)
	}
	return outcome((*[replyLen]int64)(reply))
}

// outcome is the Outcome of one request's reply.
func outcome(reply *[replyLen]int64) (backend.Outcome, error) {
	if reply[0] == refused {
		return backend.Outcome{}, fmt.Errorf("%w: a refund of more than the %d in use", backend.ErrInvalidCost, reply[1])
	}
	retry := int64(0) // an admission
	if reply[0] != 1 {
		retry = max(reply[3], 1) // a denial's, at least 1µs as the algorithms' (package algorithm)
	}
	return backend.Outcome{Count: reply[1], ResetAt: reply[2], RetryAfter: retry, At: reply[4]}, nil
}

// packedLen is the length of a packed answer: replyLen doubles.
const packedLen = 8 * replyLen

// Unpack reads the packed reply of a call of one request (its function's,
// or its script's by EVALSHA). A refused refund is an error wrapping
// backend.ErrInvalidCost.
func Unpack(reply string) (backend.Outcome, error) {
	if len(reply) != packedLen {
		return backend.Outcome{}, fmt.Errorf("unexpected script reply of %d bytes", len(reply))
	}
	var r [replyLen]int64
	for i := range r {
		f := math.Float64frombits(le64(reply[8*i:]))
		if f != math.Trunc(f) || math.Abs(f) >= 1<<62 { // NaN and ±Inf too: none of ours
			return backend.Outcome{}, fmt.Errorf("unexpected number %v in a script reply", f)
		}
		r[i] = int64(f)
	}
	return outcome(&r)
}

// le64 is the little-endian uint64 at the start of s (8 bytes at least).
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// Outcomes reads the script's reply for several requests into outs.
func Outcomes(reply []int64, outs []backend.Outcome) error {
	if len(reply) != replyLen*len(outs) {
		return fmt.Errorf("unexpected script reply %v for %d requests", reply, len(outs))
	}
	for i := range outs {
		outs[i], _ = Outcome(reply[replyLen*i : replyLen*(i+1)])
	}
	return nil
}
