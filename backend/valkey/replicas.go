package valkey

import (
	"context"
	"strings"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimit-go/ratelimit/internal/rediscore"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
)

// Option configures a Store.
type Option func(*conn)

// ErrNotReplicated is wrapped (with backend.ErrStore) by the error of a write
// that fewer replicas than WithReplicaAck asks for acknowledged in time.
var ErrNotReplicated = rediscore.ErrNotReplicated

// WithReplicaAck makes every write (Take, TakeAll, Refund, Reset) wait until
// replicas replicas hold it, for at most timeout: WAIT goes in the same round
// trip as the script (DoMulti, WAIT routed to the slot of the key's state),
// so a failover never forgets an admission the caller was told of. A write
// they did not all acknowledge in time is an error wrapping
// ErrNotReplicated and backend.ErrStore, and the Limiter's failure mode
// answers: the master did record it, and a failover now may forget it. The
// cost is the replicas' round trip on every write (go run ./bench -replicas
// 1 measures it). replicas must be at least 1 and timeout at least a
// millisecond, below the Limiter's budget.
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return func(c *conn) { c.ackReplicas, c.ackTimeout = replicas, timeout }
}

// execAcked runs the script and WAIT in one round trip to the master of
// key's slot, and requires the replicas' acknowledgement.
func (c *conn) execAcked(ctx context.Context, lua *lua.Lua, keys, args []string, key string) (vk.ValkeyMessage, error) {
	run := func(eval bool) []vk.ValkeyResult {
		var decide vk.Completed
		if eval {
			decide = c.client.B().Eval().Script(lua.Text).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
		} else {
			decide = c.client.B().Evalsha().Sha1(lua.SHA1).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
		}
		return c.client.DoMulti(ctx, decide, c.waitFor(key))
	}
	res := run(false)
	if err := res[0].Error(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		res = run(true)
	}
	reply, err := res[0].ToMessage()
	if err != nil {
		return vk.ValkeyMessage{}, err
	}
	return reply, c.ackedBy(res[1])
}

// waitFor is WAIT, routed to the node of key's state: it has no key of its
// own.
func (c *conn) waitFor(key string) vk.Completed {
	return c.client.B().Wait().Numreplicas(int64(c.ackReplicas)).Timeout(c.ackTimeout.Milliseconds()).Build().SetSlot(lua.Tag(key))
}

// ackedBy requires WAIT's reply to count the replicas asked for.
func (c *conn) ackedBy(wait vk.ValkeyResult) error {
	got, err := wait.AsInt64()
	if err != nil {
		return err
	}
	return rediscore.Acked(got, int64(c.ackReplicas), c.ackTimeout)
}

// deleteAcked deletes keys, the state of key, with WAIT in one round trip.
func (c *conn) deleteAcked(ctx context.Context, keys []string, key string) error {
	res := c.client.DoMulti(ctx, c.client.B().Del().Key(keys...).Build(), c.waitFor(key))
	if err := res[0].Error(); err != nil {
		return err
	}
	return c.ackedBy(res[1])
}
