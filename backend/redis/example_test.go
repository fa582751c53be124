package redis_test

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/redis"
)

// A limiter shared by every app instance that talks to one Redis server (or
// cluster). ContextTimeoutEnabled lets go-redis stop waiting at the caller's
// deadline.
func ExampleNew() {
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redis.New(client)
	if err != nil {
		panic(err)
	}
	limiter, err := ratelimit.New(store, ratelimit.PerMinute(100))
	if err != nil {
		panic(err)
	}
	d, err := limiter.Allow(context.Background(), "user:42")
	if err != nil {
		// errors.Is(err, ratelimit.ErrStore): the server could not decide.
		// The limiter fails closed unless built WithFailOpen.
		return
	}
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
}
