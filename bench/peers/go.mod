module github.com/ratelimit-go/ratelimit/bench/peers

go 1.26.0

replace github.com/ratelimit-go/ratelimit => ../..

require (
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/ratelimit-go/ratelimit v0.0.0-00010101000000-000000000000
	github.com/ratelimit-go/ratelimit/backend/redis v0.0.0-00010101000000-000000000000
	github.com/ratelimit-go/ratelimit/backend/valkey v0.0.0-00010101000000-000000000000
	github.com/ratelimit-go/ratelimit/servertest v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	github.com/sethvargo/go-limiter v0.7.1
	github.com/sony/gobreaker/v2 v2.4.0
	github.com/stretchr/testify v1.12.1
	github.com/ulule/limiter/v3 v3.11.2
	github.com/valkey-io/valkey-go v1.0.69
	golang.org/x/time v0.12.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/ratelimit-go/ratelimit/backend/redis => ../../backend/redis

replace github.com/ratelimit-go/ratelimit/backend/valkey => ../../backend/valkey

replace github.com/ratelimit-go/ratelimit/servertest => ../../servertest
