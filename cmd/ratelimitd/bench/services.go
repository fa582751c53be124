package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// service is one running rate limit service and a gRPC client of it.
type service struct {
	name   string
	cmd    *exec.Cmd
	admin  string // its admin (debug) listener, where the differential started it
	addr   string // its gRPC listener
	conn   *grpc.ClientConn
	client rlsv3.RateLimitServiceClient
}

func (s *service) stop() {
	if s.conn != nil {
		s.conn.Close()
	}
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

// config is the one configuration, in envoyproxy/ratelimit's format: a
// rule of limit per hour for each of the descriptor keys; alg adds
// ratelimitd's extension ("" for fixed windows).
func config(limit int, alg string, keys []string) string {
	extra := ""
	if alg != "" {
		extra = ", algorithm: " + alg
		if alg == "gcra" {
			extra += ", burst: " + strconv.Itoa(limit)
		}
	}
	conf := "domain: bench\ndescriptors:\n"
	for _, k := range keys {
		conf += fmt.Sprintf("  - key: %s\n    rate_limit: {unit: hour, requests_per_unit: %d%s}\n", k, limit, extra)
	}
	return conf
}

// descriptorKeys are the keys of n descriptors: user, then d1, d2...
func descriptorKeys(n int) []string {
	keys := []string{"user"}
	for i := 1; i < n; i++ {
		keys = append(keys, "d"+strconv.Itoa(i))
	}
	return keys
}

// localCacheBytes is envoyproxy/ratelimit's local cache of over-limit keys
// in its cached row: 64 MiB, far more than the load's keys need.
const localCacheBytes = 64 << 20

// startAll starts the peer first (the reference of every ratio), the peer
// with its local cache on (the reference of the cached ratio), then
// ratelimitd with fixed windows (its defaults, then without the near
// cache), the sliding log and GCRA: of ratelimitd's, those whose names
// only matches (the peer's two rows are the ratios' references: always).
func startAll(dir string, bins map[string]string, redisAddr string, limit, descriptors int, only *regexp.Regexp) ([]*service, error) {
	var out []*service
	peer, err := startEnvoy(dir, bins["envoy"], redisAddr, config(limit, "", descriptorKeys(descriptors)))
	if err != nil {
		return nil, err
	}
	out = append(out, peer)
	cached, err := startFromEnv("envoyproxy/ratelimit fixed, LOCAL_CACHE_SIZE_IN_BYTES", bins["envoy"], dir, redisAddr, "LOCAL_CACHE_SIZE_IN_BYTES="+fmt.Sprint(localCacheBytes))
	if err != nil {
		return nil, err
	}
	out = append(out, cached)
	for _, c := range []struct {
		name, alg string
		flags     []string
		scheme    string
		env       []string // beside the bench's own
	}{
		{"ratelimitd fixed (defaults)", "", nil, "redis", nil},
		{"ratelimitd fixed, -near-cache 0", "", []string{"-near-cache", "0"}, "redis", nil},
		{"ratelimitd fixed, -near-cache 0, no auto-pipeline", "", []string{"-near-cache", "0", "-redis-auto-pipeline=false"}, "redis", nil},
		{"ratelimitd fixed, -near-cache 0, GOGC=100", "", []string{"-near-cache", "0"}, "redis", []string{"GOGC=100"}},
		{"ratelimitd fixed, valkey://, -near-cache 0", "", []string{"-near-cache", "0"}, "valkey", nil},
		{"ratelimitd fixed, -count-over-limit (as master counts)", "", []string{"-count-over-limit"}, "redis", nil},
		{"ratelimitd sliding log (exact)", "sliding", nil, "redis", nil},
		{"ratelimitd gcra", "gcra", nil, "redis", nil},
	} {
		if !only.MatchString(c.name) {
			continue
		}
		path := filepath.Join(dir, fmt.Sprintf("ratelimitd-%d.yaml", len(out)))
		if err := os.WriteFile(path, []byte(config(limit, c.alg, descriptorKeys(descriptors))), 0o644); err != nil {
			return nil, err
		}
		args := []string{"-config", path, "-store", c.scheme + "://" + redisAddr, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-log-format", "json"}
		args = append(args, c.flags...)
		s, err := startRatelimitd(c.name, bins["ratelimitd"], args, c.env)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func startRatelimitd(name, bin string, args, env []string) (*service, error) {
	s := &service{name: name, cmd: exec.Command(bin, append(args, "-log-level", "info")...)}
	if env != nil {
		s.cmd.Env = append(os.Environ(), env...)
	}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == "serving" {
				addr <- line["grpc"].(string)
			}
		}
		close(addr)
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			return nil, fmt.Errorf("%s exited before serving", name)
		}
		return s, s.connect(a)
	case <-time.After(time.Minute):
		s.stop()
		return nil, fmt.Errorf("%s did not serve within a minute", name)
	}
}

func startEnvoy(dir, bin, redisAddr, conf string) (*service, error) {
	confDir := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(confDir, "bench.yaml"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return startFromEnv("envoyproxy/ratelimit fixed (reference)", bin, dir, redisAddr)
}

func (s *service) connect(addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	s.conn, s.client, s.addr = conn, rlsv3.NewRateLimitServiceClient(conn), addr
	return nil
}

// freePorts are n loopback ports free a moment ago.
func freePorts(n int) ([]string, error) {
	var ports []string
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	return ports, nil
}
