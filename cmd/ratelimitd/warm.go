package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
)

// warmKeys is how many keys a warm-up peeks at under each algorithm: on a
// cluster of three masters, 16 keys miss one master with odds of 3 in
// 2,000 ((2/3)^16 each); a master missed loads the library on its first
// request, as before.
const warmKeys = 16

// warmBound bounds the warm-up: a store that does not answer within it
// delays serving no longer (a dial's timeout in go-redis is 5s).
const warmBound = 5 * time.Second

// warm readies a server store before ratelimitd serves: it dials the
// server and loads the scripts (a FUNCTION LOAD, or the EVAL after a
// NOSCRIPT) by peeking at keys no rule names, which records nothing. A
// fresh server otherwise paid the load in the first request, which took
// longer than -timeout on a busy machine: the guard answered it from its
// local fallback, whose count the server never saw (the differential run
// against envoyproxy/ratelimit showed it as answers one request apart).
// It gives up at ctx's end; the caller serves either way (the guard
// covers a store that does not answer).
func warm(ctx context.Context, server backend.Store) error {
	if server == nil {
		return nil // the memory store: nothing to load
	}
	reqs := make([]backend.Request, warmKeys)
	outs := make([]backend.Outcome, warmKeys)
	for _, alg := range backend.Algorithms() {
		var burst int64
		if alg == backend.GCRA {
			burst = 1
		}
		rule, err := backend.NewRule(alg, 1, time.Second, burst, time.Second, "ratelimitd-warm:")
		if err != nil {
			return err
		}
		for i := range reqs {
			reqs[i] = backend.Request{Rule: rule, Key: strconv.Itoa(i), Cost: 1}
		}
		if _, err := server.Peek(ctx, reqs[0]); err != nil {
			return fmt.Errorf("warming the store (%v): %w", alg, err)
		}
		if err := server.PeekAll(ctx, reqs, outs); err != nil && !errors.Is(err, errors.ErrUnsupported) {
			return fmt.Errorf("warming the store (%v, all): %w", alg, err)
		}
	}
	return nil
}
