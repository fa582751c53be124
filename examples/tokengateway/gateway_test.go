package main

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	redisstore "github.com/ratelimit-go/ratelimit/backend/redis"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// TestMain stops the package's server (testserver.Get's) when the tests
// end: without it, every run left a redis-server behind.
func TestMain(m *testing.M) { testserver.Main(m) }

// Three gateways on one real Redis, one user calling them all at once, the
// model slow enough that a dozen requests are in flight: the tokens served
// in the minute stay within the user's budget (the documented bound: a
// reservation of the most a request may use, settled after, passes it by
// nothing while the model keeps to max_tokens), and the budget is spent,
// not merely unreached. Checking before and charging after, with no
// reservation, passes it by up to the answers in flight: the same run
// measures that too.
func TestThreeGatewaysKeepAUsersTokenBudget(t *testing.T) {
	srv := testserver.Get(t, testserver.Redis)
	const perMinute = 3000
	budgets := Budgets{RequestsPerMinute: 100_000, TokensPerMinute: perMinute, TokensPerDay: 1_000_000}
	served := func(reserve bool) (tokens int64, ok, denied int) {
		user := fmt.Sprintf("user-%d", rand.Uint64())
		var used atomic.Int64
		model := StandIn(func(most int) int {
			time.Sleep(time.Duration(1+rand.IntN(20)) * time.Millisecond) // in flight a while
			return most/2 + rand.IntN(most/2+1)
		})
		counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := httptest.NewRecorder()
			Reporting(model).ServeHTTP(rec, r)
			n, _ := strconv.Atoi(rec.Header().Get("X-Usage-Total-Tokens"))
			used.Add(int64(n))
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
		})
		var gateways []*httptest.Server
		for range 3 {
			client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = client.Close() })
			store, err := redisstore.New(client)
			require.NoError(t, err)
			gw, err := gateway(store, budgets, counted, reserve)
			require.NoError(t, err)
			s := httptest.NewServer(gw)
			t.Cleanup(s.Close)
			gateways = append(gateways, s)
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for c := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 25 {
					url := fmt.Sprintf("%s/v1/complete?max_tokens=%d", gateways[(c+i)%3].URL, 50+rand.IntN(250))
					req, err := http.NewRequest(http.MethodPost, url, strings.NewReader("a prompt of some forty bytes, ten tokens"))
					if err != nil {
						t.Error(err)
						return
					}
					req.Header.Set("X-User", user)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
					mu.Lock()
					if resp.StatusCode == http.StatusOK {
						ok++
					} else if resp.StatusCode == http.StatusTooManyRequests {
						denied++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return used.Load(), ok, denied
	}
	start := time.Now()
	tokens, ok, denied := served(true)
	require.Less(t, time.Since(start), 50*time.Second, "one minute of the budget: the run must fit in it")
	t.Logf("reserved, then settled: %d tokens served in %d answers (%d denied), budget %d", tokens, ok, denied, perMinute)
	require.LessOrEqual(t, tokens, int64(perMinute), "the bound: nothing past the budget")
	require.Greater(t, tokens, int64(perMinute-2*300), "the budget was spent, up to what the last reservations held back")
	require.Positive(t, denied)

	tokens, ok, denied = served(false)
	t.Logf("checked, then charged: %d tokens served in %d answers (%d denied), budget %d", tokens, ok, denied, perMinute)
	require.LessOrEqual(t, tokens, int64(perMinute+12*(300+10)), "the bound: the answers in flight (12 callers, 310 tokens at most each)")
}
