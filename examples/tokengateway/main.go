// Command tokengateway is an LLM gateway limited by tokens: each user may
// make so many requests a minute and use so many tokens a minute and a day,
// across every instance of the gateway, which share one Redis. Run three
// beside one redis-server:
//
//	go run ./examples/tokengateway -addr :8081 &
//	go run ./examples/tokengateway -addr :8082 &
//	go run ./examples/tokengateway -addr :8083 &
//	curl -H 'X-User: ann' -d 'a prompt' 'localhost:8081/v1/complete?max_tokens=500'
//
// Without -upstream it answers with a stand-in model; see Gateway for how
// the budgets hold with requests in flight.
package main

import (
	"flag"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	goredis "github.com/redis/go-redis/v9"

	redisstore "github.com/ratelimit-go/ratelimit/backend/redis"
)

func main() {
	addr := flag.String("addr", ":8080", "the address to serve on")
	redisAddr := flag.String("redis", "127.0.0.1:6379", "the Redis every instance shares")
	upstream := flag.String("upstream", "", "the model's base URL (its answers set X-Usage-Total-Tokens); empty: a stand-in")
	flag.Parse()

	client := goredis.NewClient(&goredis.Options{Addr: *redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.New(client)
	if err != nil {
		log.Fatal(err)
	}
	model := StandIn(func(most int) int { return 1 + rand.IntN(most) })
	if *upstream != "" {
		u, err := url.Parse(*upstream)
		if err != nil {
			log.Fatal(err)
		}
		model = httputil.NewSingleHostReverseProxy(u)
	}
	gw, err := Gateway(store, Defaults, Reporting(model))
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: *addr, Handler: gw, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("tokengateway on %s, Redis at %s", *addr, *redisAddr)
	log.Fatal(srv.ListenAndServe())
}
