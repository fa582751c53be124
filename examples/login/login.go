// Package login shows the penalty box (ratelimit.Policy.BlockFor) on a
// login endpoint: an account, and an address, may fail a few times; past
// that they are kept out for an hour, whatever the window would free.
//
// Each attempt reserves one failure under both policies before the
// password is checked (Multi.Allow: both or neither, atomically), and a
// success gives its reservation back (Multi.Undo). So n attempts at once,
// from one client or many, run at most as many password checks as the
// policies have failures left: a check after the attempt, counting only
// the failures it saw, would let every attempt in flight through. The
// attempt a policy denies puts its key in the box in the same step.
package login

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
)

// Limits are the failures an account and an address may make in a window,
// and how long one that fails past them is kept out.
type Limits struct {
	AccountFailures int
	AddressFailures int
	Window          time.Duration
	Block           time.Duration
}

// Defaults are 5 failures of an account and 20 of an address in 15
// minutes, then an hour out.
var Defaults = Limits{AccountFailures: 5, AddressFailures: 20, Window: 15 * time.Minute, Block: time.Hour}

// ErrBlocked is Attempt's error for an account or an address that may not
// try now; the Decision says which and for how long.
var ErrBlocked = errors.New("login: too many failed attempts")

// Guard keeps the failures of accounts and addresses, on a store every
// instance of the service shares.
type Guard struct {
	accounts, addresses *ratelimit.Limiter
	both                *ratelimit.Multi
}

// New is a Guard of l on store; opts apply to both Limiters (a clock, an
// observer). Each policy is a sliding log: its failures leave one by one,
// exactly a window after they happened.
func New(store backend.Store, l Limits, opts ...ratelimit.Option) (*Guard, error) {
	accounts, err := ratelimit.New(store, ratelimit.NewPolicy(ratelimit.SlidingWindow, l.AccountFailures, l.Window).BlockFor(l.Block),
		append([]ratelimit.Option{ratelimit.WithPrefix("login:account:"), ratelimit.WithName("account")}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("login: the account policy: %w", err)
	}
	addresses, err := ratelimit.New(store, ratelimit.NewPolicy(ratelimit.SlidingWindow, l.AddressFailures, l.Window).BlockFor(l.Block),
		append([]ratelimit.Option{ratelimit.WithPrefix("login:address:"), ratelimit.WithName("address")}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("login: the address policy: %w", err)
	}
	both, err := ratelimit.NewMulti(accounts, addresses)
	if err != nil {
		return nil, err
	}
	return &Guard{accounts: accounts, addresses: addresses, both: both}, nil
}

// Attempt runs check, the password check of account from address, if
// neither is blocked nor out of failures: ok is check's answer. A blocked
// attempt runs nothing and fails with ErrBlocked; d then says which policy
// denied (d.Name) and when to try again (d.RetryAfter). A success is not
// counted. An error of check is a failure (counted), returned as is.
func (g *Guard) Attempt(ctx context.Context, account, address string, check func() (bool, error)) (ok bool, d ratelimit.MultiDecision, err error) {
	keys := []string{account, address}
	d, err = g.both.Allow(ctx, keys...)
	switch {
	case err != nil:
		return false, d, err
	case !d.Allowed:
		return false, d, ErrBlocked
	}
	if ok, err = check(); !ok || err != nil {
		return false, d, err
	}
	_, err = g.both.Undo(ctx, keys, 1, d) // a success: its reservation given back
	return true, d, err
}

// Unlock lets account try again at once (after its owner reset the
// password, say): its failures and its block are forgotten.
func (g *Guard) Unlock(ctx context.Context, account string) error {
	return g.accounts.Reset(ctx, account)
}

// Handler serves POST requests of a form with "user" and "password",
// checked by verify: 204 on a success, 401 on a failure, 400 without a
// user, 429 with
// Retry-After (seconds) while the account or the address (address(r)) is
// blocked or out of failures.
func Handler(g *Guard, verify func(user, password string) bool, address func(*http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		user, password := r.PostFormValue("user"), r.PostFormValue("password")
		if user == "" {
			http.Error(w, "no user", http.StatusBadRequest)
			return
		}
		ok, d, err := g.Attempt(r.Context(), user, address(r), func() (bool, error) { return verify(user, password), nil })
		switch {
		case errors.Is(err, ErrBlocked):
			w.Header().Set("Retry-After", strconv.FormatInt(int64((d.RetryAfter+time.Second-1)/time.Second), 10))
			http.Error(w, "too many failed attempts", http.StatusTooManyRequests)
		case err != nil:
			http.Error(w, "try again later", http.StatusServiceUnavailable)
		case !ok:
			http.Error(w, "wrong user or password", http.StatusUnauthorized)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
}
