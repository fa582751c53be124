module github.com/ratelimit-go/ratelimit/examples/tokengateway

go 1.26.0

// This example lives in the ratelimit repository and is built against it.
replace (
	github.com/ratelimit-go/ratelimit => ../..
	github.com/ratelimit-go/ratelimit/backend/redis => ../../backend/redis
	github.com/ratelimit-go/ratelimit/backend/valkey => ../../backend/valkey
	github.com/ratelimit-go/ratelimit/servertest => ../../servertest
)

require (
	github.com/ratelimit-go/ratelimit v0.0.0-00010101000000-000000000000
	github.com/ratelimit-go/ratelimit/backend/redis v0.0.0-00010101000000-000000000000
	github.com/ratelimit-go/ratelimit/servertest v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
