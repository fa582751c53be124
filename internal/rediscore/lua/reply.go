package lua

import (
	"fmt"

	"github.com/ratelimit-go/ratelimit/backend"
)

// The scripts' replies: integers that become Outcomes.

// replyLen is the number of integers the script returns per request.
const replyLen = 5

// refused is the script's "allowed" for a refund of more than is in use.
const refused = 2

// Outcome reads the script's reply for one request. A refused refund is an
// error wrapping backend.ErrInvalidCost.
func Outcome(reply []int64) (backend.Outcome, error) {
	if len(reply) != replyLen {
		return backend.Outcome{}, fmt.Errorf("unexpected script reply %v", reply)
	}
	if reply[0] == refused {
		return backend.Outcome{}, fmt.Errorf("%w: a refund of more than the %d in use", backend.ErrInvalidCost, reply[1])
	}
	retry := int64(0) // an admission
	if reply[0] != 1 {
		retry = max(reply[3], 1) // a denial's, at least 1µs as the algorithms' (package algorithm)
	}
	return backend.Outcome{Count: reply[1], ResetAt: reply[2], RetryAfter: retry, At: reply[4]}, nil
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
