// Package frontends holds the checks of the front ends (httplimit,
// grpclimit) against real servers.
package frontends_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/redis"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

func limiter(t *testing.T, s backend.Store, p ratelimit.Policy, opts ...ratelimit.Option) *ratelimit.Limiter {
	l, err := ratelimit.New(s, p, opts...)
	require.NoError(t, err)
	return l
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })

// serve runs the middleware in a real HTTP server.
func serve(t *testing.T, m *httplimit.Middleware) *httptest.Server {
	srv := httptest.NewServer(m.Handler(ok))
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, url string) *http.Response {
	resp, err := http.Get(url)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// A store that really fails: a Redis client of a port where nothing listens.
func deadStore(t *testing.T) backend.Store {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redis.New(c)
	require.NoError(t, err)
	return s
}

func TestFailsClosedOrOpenAsTheLimiterSays(t *testing.T) {
	for _, open := range []bool{false, true} {
		var observed, handled error
		obs := ratelimit.ObserverFunc(func(_ context.Context, e ratelimit.Event) { observed = e.Err })
		opts := []ratelimit.Option{ratelimit.WithObserver(obs)}
		if open {
			opts = append(opts, ratelimit.WithFailOpen())
		}
		l := limiter(t, deadStore(t), ratelimit.PerMinute(3), opts...)
		m, err := httplimit.New([]httplimit.Rule{{Limiter: l, Key: httplimit.RemoteIP()}},
			httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
				handled = err
				w.WriteHeader(http.StatusServiceUnavailable)
			}))
		require.NoError(t, err)
		resp := get(t, serve(t, m).URL)
		if open {
			require.Equal(t, http.StatusOK, resp.StatusCode, "fail open serves the request")
			require.Empty(t, resp.Header.Get("RateLimit"), "with no quota to report")
			require.Empty(t, resp.Header.Get("X-RateLimit-Remaining"))
			require.NoError(t, handled, "a failure mode's admission is an answer, not an error to handle")
		} else {
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "fail closed refuses it")
			require.ErrorIs(t, handled, ratelimit.ErrStore, "the error handler saw the error")
		}
		require.ErrorIs(t, observed, ratelimit.ErrStore, "open=%v: the observer saw the error", open)
	}
}
