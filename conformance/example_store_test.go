package conformance_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/algorithm"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/conformance"
)

// bytesStore is a backend.Store written as a backend on a database would be,
// from the documentation alone: each decision loads the key's state as
// bytes, decides with package algorithm, and saves the bytes back with an
// expiry, all under one lock (a transaction, in a database). A remote store
// would do the same in one round trip or one transaction.
type bytesStore struct {
	backend.Unimplemented // TakeAll: unsupported (Take, Peek, Refund, Charge and Reset are below)
	mu                    sync.Mutex
	rows                  map[row]saved
	// The store's clock is its creation time moved on by the monotonic
	// clock (a wall clock can step back: a store must never decide a later
	// request at an earlier time), until the kit's Expire says how far its
	// own clock has moved (ahead): from then on it is its creation plus
	// ahead, and real time passing between the kit's steps (a busy
	// machine) does not move it past the kit's.
	created  time.Time
	ahead    time.Duration
	expiring bool
}

func newBytesStore() *bytesStore { return &bytesStore{rows: map[row]saved{}, created: time.Now()} }

// now is the store's clock.
func (s *bytesStore) now() time.Time {
	if s.expiring {
		return s.created.Add(s.ahead)
	}
	return s.created.Add(time.Since(s.created))
}

// row names a key's state under one algorithm.
type row struct {
	prefix, key string
	alg         backend.Algorithm
}

type saved struct {
	data    []byte
	expires time.Time // on the store's clock
}

// state is what the four algorithms' states have in common.
type state interface {
	Take(now int64, r algorithm.Rate, n int64) (algorithm.Outcome, algorithm.Effect)
	Peek(now int64, r algorithm.Rate, n int64) algorithm.Outcome
	Refund(now int64, r algorithm.Rate, n int64) (algorithm.Outcome, algorithm.Effect, bool)
	Undo(now, at int64, r algorithm.Rate, n int64) (algorithm.Outcome, algorithm.Effect)
	Charge(now int64, r algorithm.Rate, n int64) (algorithm.Outcome, algorithm.Effect)
	MarshalBinary() ([]byte, error)
	UnmarshalBinary([]byte) error
}

func newState(alg backend.Algorithm) (state, error) {
	switch alg {
	case backend.SlidingWindow:
		return &algorithm.Log{}, nil
	case backend.FixedWindow:
		return &algorithm.Fixed{}, nil
	case backend.SlidingWindowCounter:
		return &algorithm.SlidingCounter{}, nil
	case backend.GCRA:
		return &algorithm.Bucket{}, nil
	}
	return nil, backend.Unsupported("bytesStore", alg)
}

type op int

const (
	take op = iota
	peek
	refund // with req.Admitted: an undo of that admission
	charge
)

// do loads req's state, decides o, and saves the state if o changed it.
func (s *bytesStore) do(ctx context.Context, req backend.Request, o op) (backend.Outcome, error) {
	if err := ctx.Err(); err != nil {
		return backend.Outcome{}, err
	}
	validate := req.Validate // a cost, key or time no store decides exactly
	if o == charge {
		validate = req.ValidateCharge // a cost past the rule's limit
	}
	if err := validate(); err != nil {
		return backend.Outcome{}, err
	}
	st, err := newState(req.Rule.Algorithm())
	if err != nil {
		return backend.Outcome{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	storeNow := s.now()
	now := req.Now
	if now == 0 { // the store's own clock
		now = storeNow.UnixMicro()
	}
	k := row{req.Rule.Prefix(), req.Key, req.Rule.Algorithm()}
	old, ok := s.rows[k]
	if ok && storeNow.Before(old.expires) { // an expired row is no row
		if err := st.UnmarshalBinary(old.data); err != nil {
			// A row that is no state of ours (algorithm.ErrBadState) is no
			// state: decided as on a fresh key, and replaced below.
			st, _ = newState(req.Rule.Algorithm())
		}
	}
	var out backend.Outcome
	var e algorithm.Effect
	switch o {
	case peek:
		out = st.Peek(now, req.Rule.Rate(), req.Cost)
		return out, nil
	case refund:
		if req.Admitted != 0 {
			out, e = st.Undo(now, req.Admitted, req.Rule.Rate(), req.Cost)
		} else if out, e, ok = st.Refund(now, req.Rule.Rate(), req.Cost); !ok {
			return backend.Outcome{}, fmt.Errorf("bytesStore: %w: a refund of more than is in use", backend.ErrInvalidCost)
		}
	case charge:
		out, e = st.Charge(now, req.Rule.Rate(), req.Cost)
	default:
		out, e = st.Take(now, req.Rule.Rate(), req.Cost) // a denial may re-time state from the future, or prune a log
	}
	if !e.Changed { // the state saves to the bytes the row holds: no write
		return out, nil
	}
	data, err := st.MarshalBinary()
	if err != nil {
		return backend.Outcome{}, fmt.Errorf("bytesStore: %w: %w", backend.ErrStore, err)
	}
	expires := old.expires
	if e.Life > 0 { // written: kept for its life or the retention, whichever is longer
		keep := time.Duration(max(e.Life, req.Rule.Retain())) * time.Microsecond
		if req.Now != 0 { // decided on the caller's clock, dropped by the store's: the slack too
			keep += backend.KeepSlack
		}
		expires = storeNow.Add(keep)
	}
	s.rows[k] = saved{data: data, expires: expires}
	return out, nil
}

func (s *bytesStore) Take(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.do(ctx, req, take)
}

func (s *bytesStore) Peek(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.do(ctx, req, peek)
}

func (s *bytesStore) Refund(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.do(ctx, req, refund)
}

func (s *bytesStore) Charge(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.do(ctx, req, charge)
}

func (s *bytesStore) Reset(ctx context.Context, prefix, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, alg := range backend.Algorithms() {
		delete(s.rows, row{prefix, key, alg})
	}
	return nil
}

// expire drops the rows expired once elapsed has passed, as a database's
// TTL would.
func (s *bytesStore) expire(elapsed time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ahead, s.expiring = elapsed, true
	now := s.now()
	for k, r := range s.rows {
		if !now.Before(r.expires) {
			delete(s.rows, k)
		}
	}
}

// A store written from the documentation alone, keeping each key's state
// as bytes between decisions and dropping it when it expires, passes the
// whole kit.
func TestAStoreOnBytesPassesTheKit(t *testing.T) {
	conformance.Run(t, conformance.InProcess(func(t *testing.T) backend.Store {
		return newBytesStore()
	}), conformance.Expire(func(t *testing.T, s backend.Store, elapsed time.Duration) {
		s.(*bytesStore).expire(elapsed)
	}))
}

// A row written by hand (bytes that are no state, or numbers no decision
// writes) is no state: the store decides as on a fresh key, admitting no
// more than its limit, and the next write heals the row.
func TestACorruptRowHeals(t *testing.T) {
	ctx := context.Background()
	rule, err := backend.NewRule(backend.FixedWindow, 5, time.Hour, 0, time.Hour, "")
	if err != nil {
		t.Fatal(err)
	}
	s := newBytesStore()
	k := row{"", "user", backend.FixedWindow}
	for name, data := range map[string][]byte{
		"no state":         {9, 9, 9},
		"a count of -1e15": append([]byte{1}, varints(1, time.Now().UnixMicro(), -1e15, 0)...), // version 1, started, start, count, aligned
	} {
		s.rows[k] = saved{data: data, expires: time.Now().Add(time.Hour)}
		admitted := 0
		for i := 0; i < 20; i++ {
			out, err := s.Take(ctx, backend.Request{Rule: rule, Key: "user", Cost: 1})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if out.Allowed() {
				admitted++
			}
		}
		if admitted != 5 {
			t.Errorf("%s: admitted %d of 20 at 5 per hour, want 5", name, admitted)
		}
		var f algorithm.Fixed
		if err := f.UnmarshalBinary(s.rows[k].data); err != nil {
			t.Errorf("%s: the row did not heal: %v", name, err)
		}
		delete(s.rows, k)
	}
}

func varints(v ...int64) []byte {
	var b []byte
	for _, x := range v {
		b = binary.AppendVarint(b, x)
	}
	return b
}

// A store of your own: implement backend.Store (embedding
// backend.Unimplemented for what it leaves out), keep each key's state with the
// types of package algorithm, saved as bytes, and run conformance.Run from
// your tests. bytesStore, in this package's tests, is such a store in 150
// lines: a map behind a lock, as a database's rows and transaction would be.
func Example_aStoreOfYourOwn() {
	store := newBytesStore()
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
