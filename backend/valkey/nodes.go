package valkey

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
)

// layout is a cluster's slots as CLUSTER SLOTS last said: the address of
// each slot's master. valkey-go keeps its own but does not export it.
type layout struct {
	read   time.Time
	master [16384]uint16 // index into addrs, 0: unknown
	addrs  []string      // addrs[0] is ""
}

// layoutAge is how old a layout may be before a call asks for a new one
// (in the background): a failover shows within about that.
const layoutAge = time.Second

// nodes follows a cluster client's layout, for Node.
type nodes struct {
	layout  atomic.Pointer[layout]
	reading atomic.Bool
}

// node is Info's Node on a cluster client: the address of the master of
// the key's slot (valkey-go's slot of its hash tag) as CLUSTER SLOTS said
// within about a second, read in the background; "" until the layout is
// first read.
func (s *Store) node(prefix, key string) string { return s.c.node(key) }

func (c *conn) node(key string) string {
	if c.client.Mode() != vk.ClientModeCluster {
		return ""
	}
	l := c.nodes.layout.Load()
	if (l == nil || time.Since(l.read) > layoutAge) && c.nodes.reading.CompareAndSwap(false, true) {
		go c.readLayout()
	}
	if l == nil {
		return ""
	}
	return l.addrs[l.master[slot(lua.Tag(key))]]
}

// slot is valkey-go's hash slot of tag.
func slot(tag string) uint16 {
	c := vk.Completed{}.SetSlot(tag)
	return c.Slot()
}

// readLayout reads CLUSTER SLOTS into a new layout; a failed read keeps the
// old one.
func (c *conn) readLayout() {
	defer c.nodes.reading.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), layoutAge)
	defer cancel()
	ranges, err := c.client.Do(ctx, c.client.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return
	}
	l := &layout{read: time.Now(), addrs: []string{""}}
	index := map[string]uint16{}
	for _, r := range ranges {
		fields, err := r.ToArray()
		if err != nil || len(fields) < 3 {
			continue
		}
		first, err1 := fields[0].AsInt64()
		last, err2 := fields[1].AsInt64()
		master, err3 := fields[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(master) < 2 || first < 0 || last >= 16384 || first > last {
			continue
		}
		host, _ := master[0].ToString()
		port, _ := master[1].AsInt64()
		addr := net.JoinHostPort(host, strconv.FormatInt(port, 10))
		i, ok := index[addr]
		if !ok {
			i = uint16(len(l.addrs))
			index[addr] = i
			l.addrs = append(l.addrs, addr)
		}
		for slot := first; slot <= last; slot++ {
			l.master[slot] = i
		}
	}
	c.nodes.layout.Store(l)
}
