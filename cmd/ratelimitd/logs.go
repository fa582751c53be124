package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// clientLog routes go-redis's own log lines (a pool that cannot dial, a
// cluster that reloads its layout) into the service's logger, at warn,
// marked client=go-redis: they once went to stderr as plain text, about 40
// lines a second during an outage, whatever -log-format said.
type clientLog struct{ log *slog.Logger }

// Printf implements go-redis's internal.Logging.
func (l clientLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)), "client", "go-redis")
}

// routeClientLogs sends the clients' log lines to log.
func routeClientLogs(log *slog.Logger) { goredis.SetLogger(clientLog{log}) }
