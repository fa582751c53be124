package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/conformance"
)

// A limiter of 3 requests per second on the in-process store: the fourth
// request within the second is denied.
func Example() {
	store, err := memory.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, err := ratelimit.New(store, ratelimit.PerSecond(3))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 1; i <= 4; i++ {
		d, err := limiter.Allow(ctx, "user:42")
		if err != nil {
			panic(err) // bad input, or the store failed (ErrStore) with no failure mode
		}
		fmt.Printf("request %d: allowed=%v remaining=%d\n", i, d.Allowed, d.Remaining)
	}
	// Output:
	// request 1: allowed=true remaining=2
	// request 2: allowed=true remaining=1
	// request 3: allowed=true remaining=0
	// request 4: allowed=false remaining=0
}

// In a sliding window a denied request learns exactly when it would fit:
// when the oldest request leaves the window, not a whole window later.
func ExampleLimiter_AllowN() {
	clock := conformance.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	store, err := memory.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, _ := ratelimit.New(store, ratelimit.Policy{Limit: 5, Window: 10 * time.Second},
		ratelimit.WithCallerClock(clock.Now))
	ctx := context.Background()

	limiter.AllowN(ctx, "user:42", 2) // 12:00:00, cost 2
	clock.Advance(3 * time.Second)
	limiter.AllowN(ctx, "user:42", 3) // 12:00:03, cost 3: the window is full
	clock.Advance(time.Second)

	d, _ := limiter.Allow(ctx, "user:42") // 12:00:04
	fmt.Println("allowed:", d.Allowed, "retry after:", d.RetryAfter)
	d, _ = limiter.AllowN(ctx, "user:42", 3)
	fmt.Println("cost 3 allowed:", d.Allowed, "retry after:", d.RetryAfter)
	// Output:
	// allowed: false retry after: 6s
	// cost 3 allowed: false retry after: 9s
}

// SetPolicy applies at once to keys that already have a history: a user who
// used up 2 requests has 3 left when the limit goes up to 5.
func ExampleLimiter_SetPolicy() {
	store, err := memory.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, _ := ratelimit.New(store, ratelimit.PerMinute(2))
	ctx := context.Background()
	limiter.Allow(ctx, "user:42")
	limiter.Allow(ctx, "user:42")
	d, _ := limiter.Allow(ctx, "user:42")
	fmt.Println("under 2/min:", d.Allowed)

	if err := limiter.SetPolicy(ratelimit.PerMinute(5)); err != nil {
		panic(err)
	}
	d, _ = limiter.Allow(ctx, "user:42")
	fmt.Println("under 5/min:", d.Allowed, "remaining:", d.Remaining)
	// Output:
	// under 2/min: false
	// under 5/min: true remaining: 2
}

// Bad input is a sentinel error, and nothing is recorded.
func ExampleLimiter_AllowN_invalid() {
	store, err := memory.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, _ := ratelimit.New(store, ratelimit.PerMinute(10))
	ctx := context.Background()

	_, err = limiter.AllowN(ctx, "user:42", 11)
	fmt.Println(errors.Is(err, ratelimit.ErrInvalidCost))
	_, err = limiter.Allow(ctx, "")
	fmt.Println(errors.Is(err, ratelimit.ErrInvalidKey))
	_, err = ratelimit.New(store, ratelimit.Policy{Limit: 0, Window: time.Minute})
	fmt.Println(errors.Is(err, ratelimit.ErrInvalidPolicy))
	d, _ := limiter.Peek(ctx, "user:42")
	fmt.Println("remaining:", d.Remaining)
	// Output:
	// true
	// true
	// true
	// remaining: 10
}

// Several policies on one request: it passes only if all admit it, and the
// decision names the one that denied. The denial takes nothing from the
// other policy.
func ExampleMulti() {
	store, err := memory.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	perUser, _ := ratelimit.New(store, ratelimit.PerMinute(100), ratelimit.WithName("per-user"), ratelimit.WithPrefix("user:"))
	perIP, _ := ratelimit.New(store, ratelimit.PerMinute(2), ratelimit.WithName("per-ip"), ratelimit.WithPrefix("ip:"))
	both, _ := ratelimit.NewMulti(perUser, perIP)
	ctx := context.Background()

	for i := 1; i <= 3; i++ {
		d, _ := both.Allow(ctx, "alice", "192.0.2.7") // one key per limiter, in order
		fmt.Printf("request %d: allowed=%v strictest=%s remaining=%d\n", i, d.Allowed, d.Name, d.Remaining)
	}
	u, _ := perUser.Peek(ctx, "alice")
	fmt.Println("per-user count:", u.Count)
	// Output:
	// request 1: allowed=true strictest=per-ip remaining=1
	// request 2: allowed=true strictest=per-ip remaining=0
	// request 3: allowed=false strictest=per-ip remaining=0
	// per-user count: 2
}

// A Limiter that fails open answers for a store that cannot: the decision
// says so, and the error goes to the observer, not to the caller.
func ExampleWithFailOpen() {
	watch := ratelimit.ObserverFunc(func(_ context.Context, e ratelimit.Event) {
		fmt.Println("observed:", errors.Is(e.Err, ratelimit.ErrStore), e.Decision.Source)
	})
	store, err := memory.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, _ := ratelimit.New(store, ratelimit.PerMinute(10), ratelimit.WithFailOpen(), ratelimit.WithObserver(watch))
	down, cancel := context.WithCancel(context.Background())
	cancel() // a store call that cannot succeed
	d, err := limiter.Allow(down, "user:42")
	fmt.Println("allowed:", d.Allowed, "by:", d.Source, "error:", err)
	// Output:
	// observed: true fail-open
	// allowed: true by: fail-open error: <nil>
}

// An observer sees every decision with its key and policy, so a denial can
// be traced; dry-run mode admits everything while the observer sees what the
// new limit would have done.
func ExampleWithDryRun() {
	store, err := memory.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	watch := ratelimit.ObserverFunc(func(_ context.Context, e ratelimit.Event) {
		fmt.Printf("%s %s: would allow=%v\n", e.Name, e.Key, e.Decision.Allowed)
	})
	limiter, _ := ratelimit.New(store, ratelimit.PerMinute(1),
		ratelimit.WithName("new-limit"), ratelimit.WithObserver(watch), ratelimit.WithDryRun())
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		d, _ := limiter.Allow(ctx, "user:42")
		fmt.Println("caller sees allowed:", d.Allowed)
	}
	// Output:
	// new-limit user:42: would allow=true
	// caller sees allowed: true
	// new-limit user:42: would allow=false
	// caller sees allowed: true
}

// Wait sleeps until the request fits: here until the first request leaves
// its 50ms window.
func ExampleLimiter_Wait() {
	store, err := memory.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, _ := ratelimit.New(store, ratelimit.Policy{Limit: 1, Window: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()

	first, _ := limiter.Allow(ctx, "job-queue")
	d, err := limiter.Wait(ctx, "job-queue")
	if err != nil {
		panic(err)
	}
	fmt.Println("allowed:", d.Allowed, "after the first left:", !d.At.Before(first.At.Add(50*time.Millisecond)))
	// Output:
	// allowed: true after the first left: true
}

// GCRA spaces requests evenly (here one every 100ms) and lets an idle key
// make a burst (here 3) at once; a denial says exactly when the next fits.
func ExampleTokenBucket() {
	store, err := memory.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	clock := conformance.NewManualClock(time.Unix(1_800_000_000, 0))
	limiter, _ := ratelimit.New(store, ratelimit.TokenBucket(10, time.Second, 3), ratelimit.WithCallerClock(clock.Now))
	ctx := context.Background()
	for i := 1; i <= 4; i++ {
		d, _ := limiter.Allow(ctx, "user:42")
		fmt.Printf("request %d: allowed=%v retry-after=%v\n", i, d.Allowed, d.RetryAfter)
	}
	clock.Advance(100 * time.Millisecond)
	d, _ := limiter.Allow(ctx, "user:42")
	fmt.Println("100ms later:", d.Allowed)
	// Output:
	// request 1: allowed=true retry-after=0s
	// request 2: allowed=true retry-after=0s
	// request 3: allowed=true retry-after=0s
	// request 4: allowed=false retry-after=100ms
	// 100ms later: true
}

// A policy per key: paying customers get more, and a tier that changes
// applies at once, with the key's history.
func ExampleWithPolicyFunc() {
	store, err := memory.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	tiers := map[string]ratelimit.Policy{"acme": ratelimit.PerMinute(5)}
	limiter, _ := ratelimit.New(store, ratelimit.PerMinute(2),
		ratelimit.WithPolicyFunc(func(_ context.Context, key string) (ratelimit.Policy, error) {
			return tiers[key], nil // the zero Policy for others: the Limiter's own
		}))
	ctx := context.Background()
	for _, customer := range []string{"acme", "someone"} {
		admitted := 0
		for i := 0; i < 6; i++ {
			if d, _ := limiter.Allow(ctx, customer); d.Allowed {
				admitted++
			}
		}
		fmt.Printf("%s: %d of 6\n", customer, admitted)
	}
	// Output:
	// acme: 5 of 6
	// someone: 2 of 6
}

// A request admitted and then not served gives its quota back.
func ExampleLimiter_Refund() {
	store, err := memory.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, _ := ratelimit.New(store, ratelimit.PerMinute(3))
	ctx := context.Background()
	d, _ := limiter.AllowN(ctx, "user:42", 3)
	fmt.Println("remaining:", d.Remaining)
	// ... the upstream failed: the request was not served.
	d, _ = limiter.Refund(ctx, "user:42", 3)
	fmt.Println("after the refund:", d.Remaining)
	_, err = limiter.Refund(ctx, "user:42", 1)
	fmt.Println("refunding what was not taken:", errors.Is(err, ratelimit.ErrInvalidCost))
	// Output:
	// remaining: 0
	// after the refund: 3
	// refunding what was not taken: true
}
