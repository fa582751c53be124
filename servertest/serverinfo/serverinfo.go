// Package serverinfo reads what a Redis-protocol server reports about
// itself, for the tests and the bench.
package serverinfo

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
)

// CommandCalls reads INFO commandstats: the calls of each command since the
// server started (or CONFIG RESETSTAT), commands run by scripts included.
func CommandCalls(ctx context.Context, c *goredis.Client) (map[string]int64, error) {
	stats, err := CommandStats(ctx, c)
	if err != nil {
		return nil, err
	}
	calls := make(map[string]int64, len(stats))
	for cmd, st := range stats {
		calls[cmd] = st.Calls
	}
	return calls, nil
}

// Stat is what INFO commandstats says of one command.
type Stat struct {
	Calls int64
	Usec  int64 // the server's time in the command, µs (a script's includes its commands')
	// Failed are the calls that ran and answered an error (failed_calls:
	// an EVALSHA answered NOSCRIPT, say); 0 before Redis 7.
	Failed int64
}

// CommandStats reads INFO commandstats: the calls of each command and the
// server's time in it since the server started (or CONFIG RESETSTAT).
func CommandStats(ctx context.Context, c *goredis.Client) (map[string]Stat, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	stats := map[string]Stat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		fields := strings.Split(rest, ",")
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("INFO commandstats: %q: %w", line, err)
		}
		st := Stat{Calls: n}
		for _, f := range fields[1:] {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				st.Usec, _ = strconv.ParseInt(v, 10, 64)
			}
			if v, ok := strings.CutPrefix(f, "failed_calls="); ok {
				st.Failed, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		stats[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return stats, nil
}

// CPU reads INFO cpu: the server process's CPU time (user and system) since
// it started, in µs.
func CPU(ctx context.Context, c *goredis.Client) (int64, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO cpu: %w", err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "used_cpu_sys" && name != "used_cpu_user") {
			continue
		}
		s, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu: %q: %w", line, err)
		}
		total += s
	}
	return int64(total * 1e6), nil
}

// Reads reads INFO stats' total_reads_processed: the read events the
// server has handled since it started, one per arrival of a client's bytes
// however many commands they hold (pipelined commands share one).
func Reads(ctx context.Context, c *goredis.Client) (int64, error) {
	info, err := c.Info(ctx, "stats").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO stats: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_reads_processed:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO stats: no total_reads_processed")
}

// Scripts is what stats say of the scripts: FCALL's, EVALSHA's and EVAL's
// calls and time, which include the commands the scripts call.
func Scripts(stats map[string]Stat) Stat {
	var s Stat
	for _, cmd := range []string{"fcall", "evalsha", "eval"} {
		s.Calls += stats[cmd].Calls
		s.Usec += stats[cmd].Usec
	}
	return s
}

// notDecisions are the commands of NotClientCommand.
var notDecisions = func() map[string]bool {
	m := map[string]bool{
		"hello": true, "client": true, "cluster": true, "command": true, "ping": true, "role": true,
		"info":     true, // the report's own
		"function": true, // FUNCTION LOAD: once per server
	}
	for _, call := range scriptCall.FindAllStringSubmatch(lua.All.Text, -1) {
		m[strings.ToLower(call[1])] = true
	}
	// A script's DEL heals a corrupt key, which the bench's fresh keys never
	// need; a client's DEL is a Reset: a round trip.
	delete(m, "del")
	return m
}()

// scriptCall is a command called by a Lua script: redis.call('ZADD', ...).
var scriptCall = regexp.MustCompile(`redis\.p?call\(\s*['"]([A-Za-z_]+)['"]`)

// NotClientCommand reports whether cmd, as INFO commandstats names it, is no
// client's command for a decision: one the scripts call on the server (read
// from their text, so that a script that learns a command cannot pass it off
// as a round trip), or one a client sends once per connection or to learn a
// cluster's layout.
func NotClientCommand(cmd string) bool { return notDecisions[strings.SplitN(cmd, "|", 2)[0]] }

// ClientCommands is how many commands clients sent for decisions between
// two readings (INFO commandstats, CommandStats): every call counted by the
// server but those NotClientCommand names and those that failed. A failed
// call is the client's housekeeping, not a decision's: an FCALL answered
// "Function not found" (then FUNCTION LOAD and the FCALL again) or an
// EVALSHA answered NOSCRIPT (then EVAL) on a server that had not seen the
// scripts yet, which every goroutine meets on every master at the start of
// a run; on a loaded machine, with few decisions, they once counted as 0.09
// round trips a decision on a cluster.
func ClientCommands(before, after map[string]Stat) int64 {
	var n int64
	for cmd, st := range after {
		if !NotClientCommand(cmd) {
			n += (st.Calls - st.Failed) - (before[cmd].Calls - before[cmd].Failed)
		}
	}
	return n
}
