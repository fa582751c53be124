package testserver

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func binary(t *testing.T) string {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "redis-server is not on PATH")
	}
	return path
}

// A server that exits at start is reported at once with what it said, not
// after waiting for an answer that cannot come.
func TestAServerThatExitsAtStartSaysWhy(t *testing.T) {
	_, err := startBinary(binary(t), "--no-such-directive", "yes")
	require.ErrorIs(t, err, errExited)
	require.Contains(t, err.Error(), "no-such-directive", "the server's own words")
}

// A cluster node's bus listens on a port picked free, not on its client
// port + 10,000, which may be taken (CI failed so: "connection refused" after
// 10 s) or above 65,535.
func TestAClusterNodeHasABusPortOfItsOwn(t *testing.T) {
	path := binary(t)
	s, err := startBinary(path, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	require.NoError(t, err)
	defer s.Stop()
	_, port, _ := net.SplitHostPort(s.Addr)
	p, _ := strconv.Atoi(port)
	if !clusterPort.MatchString(s.Origin) { // the bus on p + 10,000: p must leave room for it
		require.LessOrEqual(t, p, 55535, "%s: the bus port above 65,535", s.Origin)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nodes, err := command(ctx, s.Addr, "CLUSTER", "NODES")
	require.NoError(t, err)
	// <id> 127.0.0.1:<port>@<bus port> myself,master ...
	require.NotEmpty(t, s.bus)
	require.NotEqual(t, strconv.Itoa(p+10000), s.bus)
	require.True(t, strings.HasSuffix(strings.Fields(nodes)[1], "@"+s.bus), "CLUSTER NODES says %q; want the bus on %s", nodes, s.bus)
}
