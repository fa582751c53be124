package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// servers are the throwaway servers (and clusters) this run started, one
// per list of binaries asked for (so one per network backend).
type servers struct {
	single   map[string]*testserver.Server
	clusters map[string]*testserver.Cluster
}

func (s *servers) start(binaries ...string) (string, error) {
	if s.single == nil {
		s.single = map[string]*testserver.Server{}
	}
	id := strings.Join(binaries, ",")
	if srv, ok := s.single[id]; ok {
		return srv.Addr, nil
	}
	srv, err := testserver.StartFromPath(binaries)
	if err != nil {
		return "", fmt.Errorf("%w: or pass -addr host:port of a running server", err)
	}
	s.single[id] = srv
	return srv.Addr, nil
}

// startCluster starts a cluster of three masters with a replica each.
func (s *servers) startCluster(binaries ...string) ([]string, error) {
	if s.clusters == nil {
		s.clusters = map[string]*testserver.Cluster{}
	}
	id := strings.Join(binaries, ",")
	if c, ok := s.clusters[id]; ok {
		return c.Addrs, nil
	}
	c, err := testserver.StartCluster(binaries, 2*time.Second, "--cluster-require-full-coverage", "no")
	if err != nil {
		return nil, fmt.Errorf("%w: or pass -addr with the nodes of a running cluster", err)
	}
	s.clusters[id] = c
	return c.Addrs, nil
}

func (s *servers) stopAll() {
	for _, srv := range s.single {
		srv.Stop()
	}
	for _, c := range s.clusters {
		c.Stop()
	}
}
