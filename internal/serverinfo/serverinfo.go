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
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	calls := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("INFO commandstats: %q: %w", line, err)
		}
		calls[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return calls, nil
}
