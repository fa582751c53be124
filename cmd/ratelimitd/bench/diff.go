package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// The differential run (-diff): ratelimitd and envoyproxy/ratelimit (-peer,
// a binary such as one built from its master; by default the version
// go.mod pins), each on its own redis-server, started from the same
// environment on the same configuration, asked the same requests in the
// same order. The configurations are envoyproxy/ratelimit's own
// (testdata/upstream: its examples, its integration runtime, each of its
// test files it accepts); the requests are made from their trees: every
// rule asked past its limit (wildcards with a matching value and one that
// does not match), then pairs of rules in one request, then hits: a
// request's hits_addend, a descriptor's own of 0 (a check) and one past the
// limit. Every answer is compared: the overall code, each descriptor's code,
// limit, remaining, reset (within 1 s) and the dynamic metadata's
// "metadata". A difference where the two answers' resets are more than 1 s
// apart is a window that turned between them, counted apart.

// runDiff runs the differential on every set and prints what differs.
func runDiff(bins map[string]string, upstream string) error {
	sets, err := diffSets(upstream)
	if err != nil {
		return err
	}
	var total, differ, turned, unanswered int
	for _, set := range sets {
		var rules []diffRule
		for _, f := range set {
			rs, err := rulesOf(f)
			if err != nil {
				return err
			}
			rules = append(rules, rs...)
		}
		reqs := requestsOf(rules)
		d, w, err := diffSet(bins, set, reqs)
		var refused errRefused
		if errors.As(err, &refused) {
			fmt.Printf("%-60s %4d requests unanswered: %v\n", names(set), len(reqs), err)
			total, unanswered = total+len(reqs), unanswered+len(reqs)
			continue
		}
		if err != nil {
			return fmt.Errorf("%v: %w", set, err)
		}
		fmt.Printf("%-60s %4d requests, %d differ, %d across a window's turn\n", names(set), len(reqs), d, w)
		total, differ, turned = total+len(reqs), differ+d, turned+w
	}
	fmt.Printf("\n%d requests: %d answers differ, %d more across a window's turn, %d unanswered (a service refused the configuration)\n", total, differ, turned, unanswered)
	return nil
}

func names(set []string) string {
	var n []string
	for _, f := range set {
		n = append(n, filepath.Base(filepath.Dir(f))+"/"+filepath.Base(f))
	}
	return strings.Join(n, " ")
}

// diffSet starts both services on set and compares their answers to reqs.
func diffSet(bins map[string]string, set []string, reqs []*rlsv3.RateLimitRequest) (differ, turned int, err error) {
	dir, err := os.MkdirTemp("", "ratelimitd-diff")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	conf := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		return 0, 0, err
	}
	for _, f := range set {
		data, err := os.ReadFile(f)
		if err != nil {
			return 0, 0, err
		}
		if err := os.WriteFile(filepath.Join(conf, filepath.Base(f)), data, 0o644); err != nil {
			return 0, 0, err
		}
	}
	var svcs [2]*service
	for i, bin := range []string{bins["envoy"], bins["ratelimitd"]} {
		srv, err := testserver.StartFromPath([]string{"redis-server"})
		if err != nil {
			return 0, 0, err
		}
		defer srv.Stop()
		s, err := startFromEnv([]string{"envoyproxy/ratelimit", "ratelimitd"}[i], bin, dir, srv.Addr, "RESPONSE_DYNAMIC_METADATA=true")
		if err != nil {
			return 0, 0, errRefused{err}
		}
		defer s.stop()
		svcs[i] = s
	}
	for _, req := range reqs {
		// A request whose two answers straddle a window's turn leaves the
		// services' counts apart for the rest of the window: the one asked
		// first counted it in the old window, the other in the new (the
		// straddling answer is set apart below, the ones after it were
		// not: 9 differences in one of eight runs). Every unit turns on a
		// whole second, and two answers take a few ms.
		clearOfATurn(time.Second, 100*time.Millisecond, 5*time.Millisecond)
		var res [2]*rlsv3.RateLimitResponse
		began := time.Now()
		for i, s := range svcs {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			res[i], err = s.client.ShouldRateLimit(ctx, req)
			cancel()
			if err != nil {
				return 0, 0, fmt.Errorf("%s: %w", s.name, err)
			}
		}
		if why := compare(res[0], res[1]); why != "" {
			if acrossTurn(res[0], res[1]) || turnedBetween(res[0], began, time.Now()) {
				turned++
				continue
			}
			differ++
			fmt.Printf("  %v\n    %s\n", compact(req), why)
		}
	}
	if n := svcs[1].fallbacks(); n > 0 {
		fmt.Printf("  ratelimitd's guard answered %d decisions from its local fallback (the store failed or timed out)\n", n)
	}
	return differ, turned, nil
}

// fallbacks is how many of ratelimitd's decisions its guard answered from
// its local fallback (ratelimit_decisions_total{source="fallback"} on its
// admin listener): answers a differing count may come from; 0 when it
// cannot tell.
func (s *service) fallbacks() int {
	resp, err := http.Get("http://" + s.admin + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0
	}
	n := 0
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "ratelimit_decisions_total{") && strings.Contains(line, `source="fallback"`) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			n += int(v)
		}
	}
	return n
}

// errRefused is a service that did not start on a configuration.
type errRefused struct{ error }

// startFromEnv starts bin from envoyproxy/ratelimit's environment (and
// extra) on the runtime directory under dir and the redis-server at
// redisAddr, and waits until it answers a request (of an unknown domain:
// it counts nothing).
func startFromEnv(name, bin, dir, redisAddr string, extra ...string) (*service, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	s := &service{name: name, cmd: exec.Command(bin), admin: "127.0.0.1:" + ports[2]}
	s.cmd.Env = append(os.Environ(),
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"PORT="+ports[0], "GRPC_PORT="+ports[1], "DEBUG_PORT="+ports[2],
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr, "USE_STATSD=false", "LOG_LEVEL=warn",
		"RUNTIME_ROOT="+filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false")
	s.cmd.Env = append(s.cmd.Env, extra...)
	// Its stats go to its log when statsd is off: a flood, left unread.
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	if err := s.connect("127.0.0.1:" + ports[1]); err != nil {
		s.stop()
		return nil, err
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := s.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "no-such-domain", Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}},
		}}})
		cancel()
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("%s did not answer within a minute: %w", name, err)
		}
	}
}

// compare is "" when the answers agree, else what differs.
func compare(up, ours *rlsv3.RateLimitResponse) string {
	if up.GetOverallCode() != ours.GetOverallCode() {
		return fmt.Sprintf("overall %v, ratelimitd %v", up.GetOverallCode(), ours.GetOverallCode())
	}
	if len(up.GetStatuses()) != len(ours.GetStatuses()) {
		return "a different number of statuses"
	}
	for i, a := range up.GetStatuses() {
		b := ours.GetStatuses()[i]
		switch {
		case a.GetCode() != b.GetCode():
			return fmt.Sprintf("descriptor %d: %v, ratelimitd %v", i, a.GetCode(), b.GetCode())
		case (a.GetCurrentLimit() == nil) != (b.GetCurrentLimit() == nil),
			a.GetCurrentLimit().GetRequestsPerUnit() != b.GetCurrentLimit().GetRequestsPerUnit(),
			a.GetCurrentLimit().GetUnit() != b.GetCurrentLimit().GetUnit():
			return fmt.Sprintf("descriptor %d: limit %v, ratelimitd %v", i, a.GetCurrentLimit(), b.GetCurrentLimit())
		case a.GetLimitRemaining() != b.GetLimitRemaining():
			return fmt.Sprintf("descriptor %d: remaining %d, ratelimitd %d", i, a.GetLimitRemaining(), b.GetLimitRemaining())
		case (a.GetDurationUntilReset() == nil) != (b.GetDurationUntilReset() == nil):
			return fmt.Sprintf("descriptor %d: reset %v, ratelimitd %v", i, a.GetDurationUntilReset(), b.GetDurationUntilReset())
		}
		if gap := a.GetDurationUntilReset().AsDuration() - b.GetDurationUntilReset().AsDuration(); gap > time.Second || gap < -time.Second {
			return fmt.Sprintf("descriptor %d: reset %v, ratelimitd %v", i, a.GetDurationUntilReset().AsDuration(), b.GetDurationUntilReset().AsDuration())
		}
	}
	um, om := up.GetDynamicMetadata().GetFields()["metadata"], ours.GetDynamicMetadata().GetFields()["metadata"]
	if !proto.Equal(um, om) {
		return fmt.Sprintf("metadata %v, ratelimitd %v", um, om)
	}
	return ""
}

// acrossTurn reports whether a status's resets are more than 1 s apart: a
// window turned between the two answers.
func acrossTurn(up, ours *rlsv3.RateLimitResponse) bool {
	for i, a := range up.GetStatuses() {
		if i >= len(ours.GetStatuses()) || a.GetDurationUntilReset() == nil || ours.GetStatuses()[i].GetDurationUntilReset() == nil {
			continue
		}
		if gap := a.GetDurationUntilReset().AsDuration() - ours.GetStatuses()[i].GetDurationUntilReset().AsDuration(); gap > time.Second || gap < -time.Second {
			return true
		}
	}
	return false
}

// unitLengths are the units whose windows turn on whole multiples of
// their length since the epoch, as both services align them.
var unitLengths = map[rlsv3.RateLimitResponse_RateLimit_Unit]time.Duration{
	rlsv3.RateLimitResponse_RateLimit_SECOND: time.Second,
	rlsv3.RateLimitResponse_RateLimit_MINUTE: time.Minute,
	rlsv3.RateLimitResponse_RateLimit_HOUR:   time.Hour,
	rlsv3.RateLimitResponse_RateLimit_DAY:    24 * time.Hour,
}

// turnedBetween reports whether the window of one of res's limits turned
// between began and ended (the two services were asked in turn then): a
// per-second limit's resets cannot show it, both being under a second.
func turnedBetween(res *rlsv3.RateLimitResponse, began, ended time.Time) bool {
	for _, st := range res.GetStatuses() {
		if d, ok := unitLengths[st.GetCurrentLimit().GetUnit()]; ok && !began.Truncate(d).Equal(ended.Truncate(d)) {
			return true
		}
	}
	return false
}

func compact(req *rlsv3.RateLimitRequest) string {
	var ds []string
	for _, d := range req.GetDescriptors() {
		var es []string
		for _, e := range d.GetEntries() {
			es = append(es, e.GetKey()+"="+e.GetValue())
		}
		s := "[" + strings.Join(es, " ") + "]"
		if h := d.GetHitsAddend(); h != nil {
			s += fmt.Sprintf("+%d", h.GetValue())
		}
		ds = append(ds, s)
	}
	return fmt.Sprintf("%s hits=%d %s", req.GetDomain(), req.GetHitsAddend(), strings.Join(ds, " "))
}
