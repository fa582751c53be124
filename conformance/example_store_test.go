package conformance_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/algorithm"
	"github.com/ratelimit-go/ratelimit/conformance"
)

// bytesStore is a ratelimit.Store written as a backend on a database would
// be, from the documentation alone: each decision loads the key's state as
// bytes, decides with package algorithm, and saves the bytes back with an
// expiry, all under one lock (a transaction, in a database). A remote store
// would do the same in one round trip or one transaction.
type bytesStore struct {
	mu   sync.Mutex
	rows map[row]saved
}

// row names a key's state under one algorithm.
type row struct {
	prefix, id string
	alg        ratelimit.Algorithm
}

type saved struct {
	data    []byte
	expires time.Time // on the store's clock
}

// state is what the four algorithms' states have in common.
type state interface {
	Take(now int64, r algorithm.Rate, n int64) algorithm.Outcome
	Peek(now int64, r algorithm.Rate, n int64) algorithm.Outcome
	Refund(now int64, r algorithm.Rate, n int64) (algorithm.Outcome, bool)
	Life(now int64, r algorithm.Rate) int64
	MarshalBinary() ([]byte, error)
	UnmarshalBinary([]byte) error
}

func newState(alg ratelimit.Algorithm) (state, error) {
	switch alg {
	case ratelimit.SlidingWindow:
		return &algorithm.Log{}, nil
	case ratelimit.FixedWindow:
		return &algorithm.Fixed{}, nil
	case ratelimit.SlidingWindowCounter:
		return &algorithm.SlidingCounter{}, nil
	case ratelimit.GCRA:
		return &algorithm.Bucket{}, nil
	}
	return nil, fmt.Errorf("bytesStore: algorithm %v: %w", alg, ratelimit.ErrInvalidPolicy)
}

// rate is the policy in the algorithms' units; only GCRA has a burst.
func rate(p ratelimit.Policy) algorithm.Rate {
	burst := int64(0)
	if p.Algorithm == ratelimit.GCRA {
		burst = int64(p.Burst)
	}
	return algorithm.NewRate(int64(p.Limit), p.Window.Microseconds(), burst)
}

// decision is an outcome as the caller's Decision, limit being MaxCost.
func decision(o algorithm.Outcome, limit int) ratelimit.Decision {
	return ratelimit.Decision{Allowed: o.Allowed, Limit: limit, Remaining: int(max(int64(limit)-o.Count, 0)), Count: int(o.Count),
		ResetAt: time.UnixMicro(o.ResetAt), RetryAfter: time.Duration(o.RetryAfter) * time.Microsecond, At: time.UnixMicro(o.At)}
}

type op int

const (
	take op = iota
	peek
	refund
)

// do loads req's state, decides o, and saves the state unless o is a peek.
func (s *bytesStore) do(ctx context.Context, req ratelimit.Request, o op) (ratelimit.Decision, error) {
	if err := ctx.Err(); err != nil {
		return ratelimit.Decision{}, err
	}
	if err := req.Validate(); err != nil { // a cost or a time no store decides exactly
		return ratelimit.Decision{}, err
	}
	st, err := newState(req.Policy.Algorithm)
	if err != nil {
		return ratelimit.Decision{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	storeNow := time.Now()
	now := storeNow.UnixMicro()
	if req.Clock == ratelimit.CallerClock {
		now = req.Now.UnixMicro()
	}
	k := row{req.Key.Prefix, req.Key.ID, req.Policy.Algorithm}
	if got, ok := s.rows[k]; ok && storeNow.Before(got.expires) { // an expired row is no row
		if err := st.UnmarshalBinary(got.data); err != nil {
			return ratelimit.Decision{}, fmt.Errorf("bytesStore: %w: %w", ratelimit.ErrStore, err)
		}
	}
	r, n := rate(req.Policy), int64(req.Cost)
	var out algorithm.Outcome
	switch o {
	case peek:
		return decision(st.Peek(now, r, n), req.Policy.MaxCost()), nil
	case refund:
		var ok bool
		if out, ok = st.Refund(now, r, n); !ok {
			return ratelimit.Decision{}, fmt.Errorf("bytesStore: %w: a refund of more than is in use", ratelimit.ErrInvalidCost)
		}
	default:
		out = st.Take(now, r, n) // a denial may re-time state from the future: saved all the same
	}
	data, err := st.MarshalBinary()
	if err != nil {
		return ratelimit.Decision{}, fmt.Errorf("bytesStore: %w: %w", ratelimit.ErrStore, err)
	}
	// Kept for the state's life or the retention, whichever is longer.
	keep := max(time.Duration(st.Life(now, r))*time.Microsecond, req.Retention())
	s.rows[k] = saved{data: data, expires: storeNow.Add(keep)}
	return decision(out, req.Policy.MaxCost()), nil
}

func (s *bytesStore) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return s.do(ctx, req, take)
}

func (s *bytesStore) Peek(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return s.do(ctx, req, peek)
}

func (s *bytesStore) Refund(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return s.do(ctx, req, refund)
}

func (s *bytesStore) Reset(ctx context.Context, key ratelimit.Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, alg := range ratelimit.Algorithms() {
		delete(s.rows, row{key.Prefix, key.ID, alg})
	}
	return nil
}

// A store written from the documentation alone, keeping each key's state
// as bytes between decisions, passes the whole kit.
func TestAStoreOnBytesPassesTheKit(t *testing.T) {
	conformance.Run(t, conformance.InProcess(func(t *testing.T) ratelimit.Store {
		return &bytesStore{rows: map[row]saved{}}
	}))
}

// A store of your own: implement ratelimit.Store (and, optionally,
// RefundStore and MultiStore), keep each key's state with the types of
// package algorithm, saved as bytes, and run conformance.Run from your
// tests. bytesStore, in this package's tests, is such a store in 150 lines:
// a map behind a lock, as a database's rows and transaction would be.
func Example_aStoreOfYourOwn() {
	store := &bytesStore{rows: map[row]saved{}}
	limiter, err := ratelimit.New(store, ratelimit.PerMinute(2))
	if err != nil {
		panic(err)
	}
	for i := 1; i <= 3; i++ {
		d, err := limiter.Allow(context.Background(), "user:42")
		if err != nil {
			panic(err)
		}
		fmt.Printf("request %d: allowed=%v remaining=%d\n", i, d.Allowed, d.Remaining)
	}
	// Output:
	// request 1: allowed=true remaining=1
	// request 2: allowed=true remaining=0
	// request 3: allowed=false remaining=0
}
