package testserver

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis (or Valkey) Cluster of three masters with one replica
// each, on loopback: 16,384 slots split in three, as redis-cli --cluster
// create makes it.
type Cluster struct {
	// Addrs are the nodes' addresses, masters first; for an existing
	// cluster, the addresses its variable gives.
	Addrs []string
	// Origin says what it is: "$REDIS_CLUSTER_ADDRS", "redis-server 7.0.15 x6".
	Origin string
	// Masters and Replicas are the nodes this package started (none for an
	// existing cluster): Replicas[i] replicates Masters[i].
	Masters, Replicas []*Server
}

// ClusterKind describes where to find one kind of cluster.
type ClusterKind struct {
	Env  string // the variable naming an existing cluster: comma-separated addresses
	Kind Kind   // whose binaries start one
}

var (
	// RedisCluster: $REDIS_CLUSTER_ADDRS, else six redis-server.
	RedisCluster = ClusterKind{Env: "REDIS_CLUSTER_ADDRS", Kind: Redis}
	// ValkeyCluster: $VALKEY_CLUSTER_ADDRS, else six valkey-server (or
	// redis-server).
	ValkeyCluster = ClusterKind{Env: "VALKEY_CLUSTER_ADDRS", Kind: Valkey}
)

var clusters = map[string]*Cluster{}

// GetCluster returns the package's cluster of kind k, starting it on first
// use; Main stops it.
func GetCluster(t testing.TB, k ClusterKind) *Cluster {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if c, ok := clusters[k.Env]; ok {
		return c
	}
	var c *Cluster
	if addrs := os.Getenv(k.Env); addrs != "" {
		c = &Cluster{Addrs: strings.Split(addrs, ","), Origin: "$" + k.Env}
	} else {
		var err error
		if c, err = StartCluster(k.Kind.Binaries, 2*time.Second); err != nil {
			unavailable(t, "no cluster for %s: %v", k.Env, err)
		}
	}
	clusters[k.Env] = c
	return c
}

// OwnReplicatedCluster starts a cluster of three masters and three replicas
// for t alone, whose nodes fail over after nodeTimeout; it is stopped when t
// ends. Its nodes can be killed. extra are more arguments for every node.
func OwnReplicatedCluster(t testing.TB, k Kind, nodeTimeout time.Duration, extra ...string) *Cluster {
	t.Helper()
	c, err := StartCluster(k.Binaries, nodeTimeout, extra...)
	if err != nil {
		unavailable(t, "no cluster of the test's own: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// StartCluster starts six nodes from the first of binaries on PATH and
// makes them a cluster of three masters, each with a replica, declaring a
// node failed after nodeTimeout; it returns once every node says
// cluster_state:ok and knows every slot's master, and every replica's link
// to its master is up. The caller stops it. extra are more arguments for
// every node.
func StartCluster(binaries []string, nodeTimeout time.Duration, extra ...string) (c *Cluster, err error) {
	c = &Cluster{}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	var nodes []*Server
	for i := 0; i < 6; i++ {
		// A replica's first sync starts at once, not after the 5s a
		// diskless sync waits by default for more replicas to join: a
		// cluster is up in 2s, not 7.
		s, err := StartFromPath(binaries, append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10), "--repl-diskless-sync-delay", "0"}, extra...)...)
		if err != nil {
			return c, err
		}
		nodes = append(nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	c.Masters, c.Replicas = nodes[:3], nodes[3:]
	c.Origin = nodes[0].Origin + " x6"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ids := make([]string, len(nodes))
	for i, s := range nodes {
		if ids[i], err = command(ctx, s.Addr, "CLUSTER", "MYID"); err != nil {
			return c, fmt.Errorf("CLUSTER MYID: %w", err)
		}
	}
	for i, s := range c.Masters {
		from, to := i*16384/3, (i+1)*16384/3-1
		if _, err := command(ctx, s.Addr, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(from), strconv.Itoa(to)); err != nil {
			return c, fmt.Errorf("CLUSTER ADDSLOTSRANGE: %w", err)
		}
	}
	host, port, _ := strings.Cut(nodes[0].Addr, ":")
	meet := []string{"CLUSTER", "MEET", host, port}
	if nodes[0].bus != "" {
		meet = append(meet, nodes[0].bus) // else the client port + 10,000
	}
	for _, s := range nodes[1:] {
		if _, err := command(ctx, s.Addr, meet...); err != nil {
			return c, fmt.Errorf("CLUSTER MEET: %w", err)
		}
	}
	if err := waitEvery(ctx, nodes, "every node knows the others", func(s *Server) (bool, error) {
		out, err := command(ctx, s.Addr, "CLUSTER", "NODES")
		return strings.Count(strings.TrimSpace(out), "\n") == len(nodes)-1 && !strings.Contains(out, "handshake"), err
	}); err != nil {
		return c, err
	}
	for i, s := range c.Replicas {
		if _, err := command(ctx, s.Addr, "CLUSTER", "REPLICATE", ids[i]); err != nil {
			return c, fmt.Errorf("CLUSTER REPLICATE: %w", err)
		}
	}
	if err := waitEvery(ctx, c.Replicas, "every replica is linked to its master", func(s *Server) (bool, error) {
		out, err := command(ctx, s.Addr, "INFO", "replication")
		return strings.Contains(out, "master_link_status:up"), err
	}); err != nil {
		return c, err
	}
	// Every node knows every slot's master too: with
	// --cluster-require-full-coverage no a node says cluster_state:ok
	// before gossip told it of them all, and answers a key of a slot it
	// does not know yet "CLUSTERDOWN Hash slot not served" (a test on
	// such a cluster failed so under CI's load).
	return c, waitEvery(ctx, nodes, "every node says cluster_state:ok and knows all 16384 slots", func(s *Server) (bool, error) {
		out, err := command(ctx, s.Addr, "CLUSTER", "INFO")
		return strings.Contains(out, "cluster_state:ok") && strings.Contains(out, "cluster_slots_assigned:16384"), err
	})
}

// waitEvery waits until ok holds on every node.
func waitEvery(ctx context.Context, nodes []*Server, what string, ok func(*Server) (bool, error)) error {
	for _, s := range nodes {
		for {
			done, err := ok(s)
			if done {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("testserver: not so within 30s: %s (%s: %v)", what, s.Addr, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// Stop stops every node this package started.
func (c *Cluster) Stop() {
	for _, s := range append(append([]*Server(nil), c.Masters...), c.Replicas...) {
		if s != nil {
			s.Stop()
		}
	}
}
