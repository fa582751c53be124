package login

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/conformance"
)

// guard is a Guard of Defaults on a memory store, both on clock.
func guard(t *testing.T, clock *conformance.ManualClock) *Guard {
	t.Helper()
	store, err := memory.New(memory.WithStoreClock(clock.Now))
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	g, err := New(store, Defaults, ratelimit.WithCallerClock(clock.Now))
	require.NoError(t, err)
	return g
}

func wrong() (bool, error) { return false, nil }
func right() (bool, error) { return true, nil }

// TestAHammerOnOneAccountChecksFivePasswords: 200 wrong passwords at once
// on one account, from 200 addresses, run exactly its 5 failures' checks;
// every other attempt is refused before its check.
func TestAHammerOnOneAccountChecksFivePasswords(t *testing.T) {
	g := guard(t, conformance.NewManualClock(time.Unix(1_800_000_000, 0)))
	var checks, blocked atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := g.Attempt(context.Background(), "alice", "203.0.113."+strconv.Itoa(i), func() (bool, error) { checks.Add(1); return false, nil })
			if errors.Is(err, ErrBlocked) {
				blocked.Add(1)
			} else {
				require.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(Defaults.AccountFailures), checks.Load(), "password checks")
	require.Equal(t, int64(200-Defaults.AccountFailures), blocked.Load())
}

// TestBlockedForAnHourThenFreeAgain: the sixth failure's attempt is refused
// and boxes the account for an hour, though the window frees its failures
// after 15 minutes; at the hour's end it may try again. The address that
// failed 5 times is not blocked for another account.
func TestBlockedForAnHourThenFreeAgain(t *testing.T) {
	clock := conformance.NewManualClock(time.Unix(1_800_000_000, 0))
	g, ctx := guard(t, clock), context.Background()
	for range 5 {
		ok, _, err := g.Attempt(ctx, "alice", "198.51.100.7", wrong)
		require.NoError(t, err)
		require.False(t, ok)
	}
	_, d, err := g.Attempt(ctx, "alice", "198.51.100.7", right)
	require.ErrorIs(t, err, ErrBlocked, "even the right password: no check runs")
	require.Equal(t, "account", d.Name)
	require.Equal(t, time.Hour, d.RetryAfter)
	blockedAt := clock.Now()

	ok, _, err := g.Attempt(ctx, "bob", "198.51.100.7", right)
	require.NoError(t, err)
	require.True(t, ok, "the address has failures left")

	clock.Advance(Defaults.Window + time.Minute) // alice's failures have left the window
	_, d, err = g.Attempt(ctx, "alice", "198.51.100.7", right)
	require.ErrorIs(t, err, ErrBlocked)
	require.Equal(t, blockedAt.Add(time.Hour).Sub(clock.Now()), d.RetryAfter, "the box's rest")

	clock.Advance(d.RetryAfter - time.Microsecond)
	_, _, err = g.Attempt(ctx, "alice", "198.51.100.7", right)
	require.ErrorIs(t, err, ErrBlocked, "a microsecond before the hour ends")
	clock.Advance(time.Microsecond)
	ok, _, err = g.Attempt(ctx, "alice", "198.51.100.7", right)
	require.NoError(t, err)
	require.True(t, ok, "at the hour's end")
}

// TestSuccessesAreNotCounted: a hundred successes leave all five failures.
func TestSuccessesAreNotCounted(t *testing.T) {
	g, ctx := guard(t, conformance.NewManualClock(time.Unix(1_800_000_000, 0))), context.Background()
	for range 100 {
		ok, _, err := g.Attempt(ctx, "alice", "192.0.2.1", right)
		require.NoError(t, err)
		require.True(t, ok)
	}
	checks := 0
	for range 10 {
		if _, _, err := g.Attempt(ctx, "alice", "192.0.2.1", func() (bool, error) { checks++; return false, nil }); err != nil {
			require.ErrorIs(t, err, ErrBlocked)
		}
	}
	require.Equal(t, Defaults.AccountFailures, checks)
}

// TestUnlockLiftsTheBlock: a reset account may try at once.
func TestUnlockLiftsTheBlock(t *testing.T) {
	g, ctx := guard(t, conformance.NewManualClock(time.Unix(1_800_000_000, 0))), context.Background()
	for range 6 {
		_, _, _ = g.Attempt(ctx, "alice", "192.0.2.1", wrong)
	}
	_, _, err := g.Attempt(ctx, "alice", "192.0.2.1", right)
	require.ErrorIs(t, err, ErrBlocked)
	require.NoError(t, g.Unlock(ctx, "alice"))
	ok, _, err := g.Attempt(ctx, "alice", "192.0.2.1", right)
	require.NoError(t, err)
	require.True(t, ok)
}

// TestAnAddressTryingManyAccountsIsBlocked: one address failing once on
// each of many accounts runs 20 checks, then is boxed for an hour, for
// every account; another address is not.
func TestAnAddressTryingManyAccountsIsBlocked(t *testing.T) {
	clock := conformance.NewManualClock(time.Unix(1_800_000_000, 0))
	g, ctx := guard(t, clock), context.Background()
	checks := 0
	for i := range 40 {
		_, d, err := g.Attempt(ctx, "user"+strconv.Itoa(i), "192.0.2.66", func() (bool, error) { checks++; return false, nil })
		if err != nil {
			require.ErrorIs(t, err, ErrBlocked)
			require.Equal(t, "address", d.Name)
		}
	}
	require.Equal(t, Defaults.AddressFailures, checks)
	clock.Advance(Defaults.Window + time.Minute)
	_, _, err := g.Attempt(ctx, "carol", "192.0.2.66", right)
	require.ErrorIs(t, err, ErrBlocked, "still within the hour")
	ok, _, err := g.Attempt(ctx, "carol", "192.0.2.67", right)
	require.NoError(t, err)
	require.True(t, ok)
}

// TestTheHandlerSays429WithRetryAfter: the endpoint's answers.
func TestTheHandlerSays429WithRetryAfter(t *testing.T) {
	g := guard(t, conformance.NewManualClock(time.Unix(1_800_000_000, 0)))
	h := Handler(g, func(user, password string) bool { return password == "hunter2" }, func(r *http.Request) string { return "192.0.2.1" })
	post := func(user, password string) *httptest.ResponseRecorder {
		form := url.Values{"user": {user}, "password": {password}}
		r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	require.Equal(t, http.StatusNoContent, post("alice", "hunter2").Code)
	require.Equal(t, http.StatusBadRequest, post("", "x").Code)
	for range 5 {
		require.Equal(t, http.StatusUnauthorized, post("alice", "guess").Code)
	}
	w := post("alice", "hunter2")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Equal(t, "3600", w.Header().Get("Retry-After"))
}
