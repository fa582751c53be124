package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/conformance"
)

// AgeScript ages every key of the server that has a TTL by ARGV[1] ms (a
// negative age gives time back), deleting a key whose TTL runs out: a
// server's expiry moved to another clock, in one atomic step. It scans the
// whole keyspace: for a server of the test's own, on one node.
const AgeScript = `
local by, cursor = tonumber(ARGV[1]), "0"
repeat
  local r = redis.call("SCAN", cursor, "COUNT", 1000)
  cursor = r[1]
  for _, k in ipairs(r[2]) do
    local ttl = redis.call("PTTL", k)
    if ttl > 0 then
      if ttl - by <= 0 then redis.call("DEL", k) else redis.call("PEXPIRE", k, ttl - by) end
    end
  end
until cursor == "0"
return 0`

// KitClockExpiry is a conformance.ExpireFunc for a server store that keeps
// state by TTL: it moves the server's expiry onto the kit's clock, so that
// the expiry scenario is independent of real time. A TTL counts real time
// from its write, while the kit moves its clock by steps: at each call, the
// TTLs are aged (age runs AgeScript) by what the kit's clock moved since the
// last call less the real time that passed meanwhile (which the server has
// counted already), so that a key expires when the kit's clock, not the
// wall's, passes its TTL. A store whose TTLs are too short then loses state
// the kit still counts, however slow or fast the machine.
func KitClockExpiry(age func(ctx context.Context, by time.Duration) error) conformance.ExpireFunc {
	type mark struct {
		elapsed time.Duration
		real    time.Time
	}
	var (
		mu    sync.Mutex
		marks = map[backend.Store]mark{}
	)
	return func(t *testing.T, store backend.Store, elapsed time.Duration) {
		mu.Lock()
		last, seen := marks[store]
		now := time.Now()
		marks[store] = mark{elapsed, now}
		mu.Unlock()
		by := elapsed - last.elapsed
		if seen { // before the first call, the real time of the scenario's first steps: within the slack
			by -= now.Sub(last.real)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := age(ctx, by); err != nil {
			t.Fatalf("aging the server's TTLs by %v: %v", by, err)
		}
	}
}
