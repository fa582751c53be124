package valkey

import (
	"context"

	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/script"
)

// Functions: a request's decision is an FCALL of its algorithm's function
// (script.Library, loaded on the first "Function not found") where the
// server has functions (Valkey, Redis 7), else the EVALSHA of the same
// script, with the same keys and arguments.

// call runs the script lua of alg (-1: All, which runs by EVALSHA alone) on
// keys with args: as the FCALL of alg's function while the server may have
// functions, loading the library on the node of keys when it does not have
// it yet.
func (s *Store) call(ctx context.Context, lua *vk.Lua, alg int, keys, args []string) ([]int64, error) {
	if alg >= 0 && !s.noFunctions.Load() {
		reply, err := s.fcall(ctx, alg, keys, args)
		refused := false
		if script.FunctionMissing(err) {
			lerr := s.loadLibrary(ctx, keys[0])
			_, answer := vk.IsValkeyErr(lerr)
			switch {
			case lerr == nil:
				reply, err = s.fcall(ctx, alg, keys, args)
			case answer: // the server refused the library
				refused = true
			default: // no answer: the call fails as any would
				return nil, lerr
			}
		}
		if !refused && !script.NoFunctions(err) && !script.FunctionMissing(err) {
			return reply, err
		}
		// A server without functions, an ACL that forbids them, a library
		// the server refused, or one loaded yet not found where the call
		// went: EVALSHA from now on.
		s.noFunctions.Store(true)
	}
	return lua.Exec(ctx, s.client, keys, args).AsIntSlice()
}

func (s *Store) fcall(ctx context.Context, alg int, keys, args []string) ([]int64, error) {
	cmd := s.client.B().Fcall().Function(script.Function(backend.Algorithm(alg))).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return s.client.Do(ctx, cmd).AsIntSlice()
}

// loadLibrary loads the functions on the server that decides key (a server
// key): on a cluster, the master of its slot as the store's layout names
// it, or while the layout is unknown every node (a replica refuses: its
// master's copy reaches it). A library another instance loaded first is
// loaded.
func (s *Store) loadLibrary(ctx context.Context, key string) error {
	if s.client.Mode() != vk.ClientModeCluster {
		return loaded(s.client.Do(ctx, s.client.B().FunctionLoad().FunctionCode(script.Library).Build()).Error())
	}
	nodes := s.client.Nodes()
	if l := s.nodes.layout.Load(); l != nil {
		if node, ok := nodes[l.addrs[l.master[slot(script.HashTag(key))]]]; ok {
			return loaded(node.Do(ctx, node.B().FunctionLoad().FunctionCode(script.Library).Build()).Error())
		}
	}
	for _, node := range nodes { // a command is built for each Do: valkey-go recycles it
		_ = node.Do(ctx, node.B().FunctionLoad().FunctionCode(script.Library).Build()).Error() // the call after it tells
	}
	return nil
}

// loaded is FUNCTION LOAD's error, but none for a library that is there.
func loaded(err error) error {
	if script.LibraryLoaded(err) {
		return nil
	}
	return err
}
