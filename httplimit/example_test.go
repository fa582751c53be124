package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// Two requests per minute per API key (the X-API-Key header): the third gets
// 429 with Retry-After, and every response carries the quota headers.
func Example() {
	store, err := memory.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	perKey, err := ratelimit.New(store, ratelimit.PerMinute(2), ratelimit.WithName("per-api-key"))
	if err != nil {
		panic(err)
	}
	mw, err := httplimit.New([]httplimit.Rule{{Limiter: perKey, Key: httplimit.Header("X-API-Key")}})
	if err != nil {
		panic(err)
	}
	api := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	}))

	for i := 1; i <= 3; i++ {
		req := httptest.NewRequest(http.MethodGet, "/api", nil)
		req.Header.Set("X-API-Key", "k-123")
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		h := rec.Header()
		fmt.Printf("%d RateLimit-Policy: %s | RateLimit: %s | Retry-After: %q\n",
			rec.Code, h.Get("RateLimit-Policy"), h.Get("RateLimit"), h.Get("Retry-After"))
	}
	// Output:
	// 200 RateLimit-Policy: "per-api-key";q=2;w=60 | RateLimit: "per-api-key";r=1;t=60 | Retry-After: ""
	// 200 RateLimit-Policy: "per-api-key";q=2;w=60 | RateLimit: "per-api-key";r=0;t=60 | Retry-After: ""
	// 429 RateLimit-Policy: "per-api-key";q=2;w=60 | RateLimit: "per-api-key";r=0;t=60 | Retry-After: "60"
}
