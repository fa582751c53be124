package redis

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/script"
)

// TakeAll implements backend.MultiStore: one request by its own script or
// function, as Take but for a denial, which writes nothing (a Multi of one
// policy: httplimit's, ratelimitd's one descriptor); several by one EVALSHA
// for every request, whatever their keys, on a single server; on a cluster or ring client, one
// for requests on one caller's key (one hash tag), and for keys of several
// tags a script per tag, sent at once, in two steps (script.TakeApart: a
// peek, then a take if every one would admit), or, with WithReplicaAck,
// a refusal (errors.ErrUnsupported).
func (s *Store) TakeAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) (err error) {
	defer script.Recover("ratelimit/redis", &err)
	if len(reqs) == 1 && len(outs) == 1 { // Multi of one policy: its own script (or function)
		outs[0], err = s.decide(ctx, reqs[0], script.TakeQuiet)
		return err
	}
	if err := script.TakeAll(ctx, reqs, outs, !s.routed, s.ackReplicas == 0, s.all); err != nil {
		return fmt.Errorf("ratelimit/redis: %w", err)
	}
	return nil
}

// all runs the script of several requests on keys, with op, into outs.
func (s *Store) all(ctx context.Context, reqs []backend.Request, keys []string, op script.Op, outs []backend.Outcome) error {
	words := append(make([]any, 0, 3+len(keys)+len(reqs)*script.ArgsPerRequest), evalsha, allSHA, len(keys))
	for _, k := range keys {
		words = append(words, k)
	}
	words = append(words, s.args.ForAllOp(reqs, op)...)
	var reply []int64
	var err error
	if s.ackReplicas > 0 && op != script.Peek {
		reply, err = s.runAcked(ctx, new(goredis.IntSliceCmd), words, reqs[0].Key)
	} else {
		reply, err = s.run(ctx, new(goredis.IntSliceCmd), words, -1, "")
	}
	if err != nil {
		return err
	}
	return script.Outcomes(reply, outs)
}
