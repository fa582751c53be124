package valkey_test

import (
	"context"
	"fmt"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/valkey"
)

// A limiter on Valkey. A short MaxFlushDelay lets valkey-go send the
// decisions of concurrent callers together: more decisions per second.
func ExampleNew() {
	client, err := vk.NewClient(vk.ClientOption{
		InitAddress:   []string{"127.0.0.1:6379"},
		DisableCache:  true,
		MaxFlushDelay: 50 * time.Microsecond,
	})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	store, err := valkey.New(client)
	if err != nil {
		panic(err)
	}
	limiter, err := ratelimit.New(store, ratelimit.PerMinute(100))
	if err != nil {
		panic(err)
	}
	d, err := limiter.Allow(context.Background(), "user:42")
	if err != nil {
		return // errors.Is(err, ratelimit.ErrStore)
	}
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
}
