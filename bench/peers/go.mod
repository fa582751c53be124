module github.com/ratelimit-go/ratelimit/bench/peers

go 1.23.0

replace github.com/ratelimit-go/ratelimit => ../..

require (
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/ratelimit-go/ratelimit v0.0.0-00010101000000-000000000000
	github.com/ratelimit-go/ratelimit/backend/redis v0.0.0-00010101000000-000000000000
	github.com/ratelimit-go/ratelimit/backend/valkey v0.0.0-00010101000000-000000000000
	github.com/ratelimit-go/ratelimit/servertest v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.18.0
	github.com/sethvargo/go-limiter v0.7.1
	github.com/sony/gobreaker/v2 v2.4.0
	github.com/stretchr/testify v1.10.0
	github.com/ulule/limiter/v3 v3.11.2
	github.com/valkey-io/valkey-go v1.0.69
	golang.org/x/time v0.12.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/sys v0.31.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)

replace github.com/ratelimit-go/ratelimit/backend/redis => ../../backend/redis

replace github.com/ratelimit-go/ratelimit/backend/valkey => ../../backend/valkey

replace github.com/ratelimit-go/ratelimit/servertest => ../../servertest
