package redis

import (
	"context"
	"errors"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/script"
)

// Functions: a request's decision is an FCALL of its algorithm's function
// (script.Library, loaded on the first "Function not found") where the
// server has functions (Redis 7, Valkey), else the EVALSHA of the same
// script. Both take the same keys and arguments, so only the first two
// words of the command differ.

// The words naming each algorithm's function, boxed once.
var (
	fcall     any = "fcall"
	functions     = func() (b [4]any) {
		for alg := range b {
			b[alg] = script.Function(backend.Algorithm(alg))
		}
		return b
	}()
)

// decideCall runs words (an EVALSHA of the script of alg) as cmd: as the
// FCALL of alg's function while the server may have functions, loading the
// library on the node of key when it does not have it yet.
func (s *Store) decideCall(ctx context.Context, cmd *goredis.IntSliceCmd, words []any, alg int, key string) ([]int64, error) {
	if !s.noFunctions.Load() {
		sha := words[1]
		words[0], words[1] = fcall, functions[alg]
		reply, err := s.process(ctx, cmd, words)
		refused := false
		if script.FunctionMissing(err) {
			lerr := s.loadLibrary(ctx, key)
			var answer goredis.Error
			switch {
			case lerr == nil:
				reply, err = s.process(ctx, cmd, words)
			case errors.As(lerr, &answer): // the server refused the library
				refused = true
			default: // no answer: the call fails as any would
				words[0], words[1] = evalsha, sha
				return nil, lerr
			}
		}
		words[0], words[1] = evalsha, sha
		if !refused && !script.NoFunctions(err) && !script.FunctionMissing(err) {
			return reply, err
		}
		// A server before Redis 7, an ACL that forbids functions, a library
		// the server refused, or one loaded yet not found where the call
		// went (a ring client routes FUNCTION LOAD elsewhere): EVALSHA from
		// now on.
		s.noFunctions.Store(true)
	}
	return s.evalSHA(ctx, cmd, words)
}

// loadLibrary loads the functions on the server that decides key: a
// cluster's master of its slot, else the client's server. A library another
// instance loaded first is loaded; any other answer is an error.
func (s *Store) loadLibrary(ctx context.Context, key string) error {
	var err error
	if s.masterFor != nil {
		var master *goredis.Client
		if master, err = s.masterFor(ctx, script.Tag(key)); err == nil {
			err = master.FunctionLoad(ctx, script.Library).Err()
		}
	} else {
		err = s.client.Process(ctx, goredis.NewStringCmd(ctx, "function", "load", script.Library))
	}
	if script.LibraryLoaded(err) {
		return nil
	}
	return err
}

// script runs words, an EVALSHA of the script of alg (-1: All, which runs
// by EVALSHA alone), as decideCall does.
func (s *Store) script(ctx context.Context, cmd *goredis.IntSliceCmd, words []any, alg int, key string) ([]int64, error) {
	if alg < 0 {
		return s.evalSHA(ctx, cmd, words)
	}
	return s.decideCall(ctx, cmd, words, alg, key)
}

// process sends words as cmd, routed by the first key (the 4th word).
func (s *Store) process(ctx context.Context, cmd *goredis.IntSliceCmd, words []any) ([]int64, error) {
	*cmd = *goredis.NewIntSliceCmd(ctx, words...)
	cmd.SetFirstKeyPos(3)
	err := s.client.Process(ctx, cmd)
	return cmd.Val(), err
}
