package valkey

import (
	"context"

	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
)

// Functions: a request's decision is an FCALL of its algorithm's function
// (lua.Library, loaded on the first "Function not found") where the
// server has functions (Valkey, Redis 7), else the EVALSHA of the same
// script, with the same keys and arguments (rediscore.Store decides which).

// all is call's alg for All's function.
const all = -1

// call runs script on keys with args by EVALSHA (valkey-go falls
// back to EVAL on NOSCRIPT), or, for script nil, the FCALL of alg's function
// (All's for all), and returns its reply: packed for one request's, a
// table for All's.
func (c *conn) call(ctx context.Context, script *vk.Lua, alg int, keys, args []string) (vk.ValkeyMessage, error) {
	if script == nil {
		fn := lua.AllFunction()
		if alg != all {
			fn = lua.Function(backend.Algorithm(alg))
		}
		cmd := c.client.B().Fcall().Function(fn).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
		return c.client.Do(ctx, cmd).ToMessage()
	}
	return script.Exec(ctx, c.client, keys, args).ToMessage()
}

// LoadLibrary implements rediscore.Client: FUNCTION LOAD on the server that
// decides req's key: on a cluster, the master of its slot as the store's
// layout names it, or while the layout is unknown every node (a replica
// refuses: its master's copy reaches it). A library another instance
// loaded first is loaded.
func (c *conn) LoadLibrary(ctx context.Context, req backend.Request) (refused bool, err error) {
	err = c.loadLibrary(ctx, lua.Keys(req)[0])
	if lua.LibraryLoaded(err) {
		return false, nil
	}
	_, refused = vk.IsValkeyErr(err)
	return refused, err
}

func (c *conn) loadLibrary(ctx context.Context, key string) error {
	if c.client.Mode() != vk.ClientModeCluster {
		return c.client.Do(ctx, c.client.B().FunctionLoad().FunctionCode(lua.Library).Build()).Error()
	}
	nodes := c.client.Nodes()
	if l := c.nodes.layout.Load(); l != nil {
		if node, ok := nodes[l.addrs[l.master[slot(lua.HashTag(key))]]]; ok {
			return node.Do(ctx, node.B().FunctionLoad().FunctionCode(lua.Library).Build()).Error()
		}
	}
	for _, node := range nodes { // a command is built for each Do: valkey-go recycles it
		_ = node.Do(ctx, node.B().FunctionLoad().FunctionCode(lua.Library).Build()).Error() // the call after it tells
	}
	return nil
}
