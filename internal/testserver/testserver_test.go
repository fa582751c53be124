package testserver

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
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
	if !errors.Is(err, errExited) {
		t.Fatalf("want errExited, got %v", err)
	}
	if !strings.Contains(err.Error(), "no-such-directive") {
		t.Fatalf("the server's own words are missing: %v", err)
	}
}

// A cluster node's bus listens on a port picked free, not on its client
// port + 10,000, which may be taken (CI failed so: "connection refused" after
// 10 s) or above 65,535.
func TestAClusterNodeHasABusPortOfItsOwn(t *testing.T) {
	path := binary(t)
	s, err := startBinary(path, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	_, port, _ := net.SplitHostPort(s.Addr)
	p, _ := strconv.Atoi(port)
	if !clusterPort.MatchString(s.Origin) { // the bus on p + 10,000: p must leave room for it
		if p > 55535 {
			t.Fatalf("%s: client port %d, bus port above 65,535", s.Origin, p)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nodes, err := command(ctx, s.Addr, "CLUSTER", "NODES")
	if err != nil {
		t.Fatal(err)
	}
	// <id> 127.0.0.1:<port>@<bus port> myself,master ...
	addr := strings.Fields(nodes)[1]
	if want := s.bus; !strings.HasSuffix(addr, "@"+want) || want == strconv.Itoa(p+10000) {
		t.Fatalf("CLUSTER NODES says %q; want the bus on %s, given with --cluster-port", addr, want)
	}
}
