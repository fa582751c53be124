package main

import (
	"context"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/servertest/serverinfo"
)

// serverClock measures the server's time over a run: CONFIG RESETSTAT at
// its start, INFO commandstats at its end; and its CPU time (INFO cpu) at
// both.
type serverClock struct {
	admin *goredis.Client
	cpu0  int64 // µs, at the start
}

func startServerClock(ctx context.Context, addr string) (*serverClock, error) {
	admin := goredis.NewClient(&goredis.Options{Addr: addr})
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		admin.Close()
		return nil, err
	}
	cpu0, err := serverinfo.CPU(ctx, admin)
	if err != nil {
		admin.Close()
		return nil, err
	}
	return &serverClock{admin: admin, cpu0: cpu0}, nil
}

// cpu is the server process's CPU time (user and system) per decision over
// decisions, in µs. Unlike usec, it does not count the time a command
// waited while the server was descheduled, which the bench's own
// goroutines on the same cores cause; it does count each call's reads and
// writes of the network, the same for every row that sends a decision in
// a round trip of its own.
func (s *serverClock) cpu(ctx context.Context, decisions float64) (float64, error) {
	cpu, err := serverinfo.CPU(ctx, s.admin)
	if err != nil {
		return 0, err
	}
	return float64(cpu-s.cpu0) / decisions, nil
}

func (s *serverClock) close() { s.admin.Close() }

// meta are the commands no decision sends: the measurement's own, and a
// connection's set-up.
var meta = map[string]bool{"config|resetstat": true, "config": true, "info": true, "ping": true, "hello": true,
	"client": true, "client|setinfo": true, "command": true, "select": true}

// usec is the server's time per decision over decisions: the scripts' time
// (EVALSHA and EVAL, which includes the commands they call) when the
// decisions are scripts, else the time of every command.
func (s *serverClock) usec(ctx context.Context, decisions float64) (float64, error) {
	stats, err := serverinfo.CommandStats(ctx, s.admin)
	if err != nil {
		return 0, err
	}
	scripts := serverinfo.Scripts(stats)
	if float64(scripts.Calls) >= decisions/2 {
		return float64(scripts.Usec) / decisions, nil
	}
	var all int64 // every command's time, the scripts' included
	for cmd, st := range stats {
		if !meta[cmd] {
			all += st.Usec
		}
	}
	return float64(all) / decisions, nil
}
