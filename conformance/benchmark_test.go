package conformance

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
)

// slowStore takes 5 ms on one call in 10, as a loaded server does now and
// then, unless the context ends first.
type slowStore struct {
	backend.Store
	calls atomic.Int64
}

// Info implements backend.Store: a store that waits, not in process as the
// memory store it wraps is, so that the Limiter gives it a budget.
func (s *slowStore) Info() backend.Info { return backend.Info{} }

func (s *slowStore) Take(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	if s.calls.Add(1)%10 == 0 {
		select {
		case <-ctx.Done():
			return backend.Outcome{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return s.Store.Take(ctx, req)
}

// A benchmark whose calls miss a 1 ms budget now and then once failed on
// the first miss, printed one line per goroutine and lost its figures. It
// now reports them, the misses counted, and fails only past MaxFailures.
func TestBenchmarkCountsMissesAndKeepsItsFigures(t *testing.T) {
	mem, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	l, err := ratelimit.New(&slowStore{Store: mem}, ratelimit.PerSecond(100), ratelimit.WithTimeout(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var failure error
	r := testing.Benchmark(func(b *testing.B) { failure = benchAllow(b, l, 1, 1) })
	if r.N == 0 || failure != nil {
		t.Fatalf("the benchmark failed: %v", failure)
	}
	for _, m := range []string{"decisions/s", "p50-ns", "p99-ns", "timeouts", "errors"} {
		if _, ok := r.Extra[m]; !ok {
			t.Errorf("no %s in %v", m, r.Extra)
		}
	}
	if r.Extra["timeouts"] < 1 {
		t.Errorf("%v timeouts of %d calls, one in ten of which misses the budget", r.Extra["timeouts"], r.N)
	}
	if r.Extra["decisions/s"] <= 0 || r.Extra["p99-ns"] < r.Extra["p50-ns"] {
		t.Errorf("figures out of order: %v", r.Extra)
	}

	testing.Benchmark(func(b *testing.B) { failure = benchAllow(b, l, 4, 0) })
	if failure == nil {
		t.Errorf("MaxFailures(0), with calls missing the budget, did not fail the benchmark")
	}
}
