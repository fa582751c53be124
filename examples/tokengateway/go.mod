module github.com/ratelimit-go/ratelimit/examples/tokengateway

go 1.23.0

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
	github.com/redis/go-redis/v9 v9.18.0
	github.com/stretchr/testify v1.10.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
