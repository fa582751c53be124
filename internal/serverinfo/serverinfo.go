// Package serverinfo reads what a Redis-protocol server reports about
// itself, for the tests and the bench.
package serverinfo

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"
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

// Scripts is what stats say of the scripts: EVALSHA's and EVAL's calls and
// time, which include the commands the scripts call.
func Scripts(stats map[string]Stat) Stat {
	var s Stat
	for _, cmd := range []string{"evalsha", "eval"} {
		s.Calls += stats[cmd].Calls
		s.Usec += stats[cmd].Usec
	}
	return s
}
