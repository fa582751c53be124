module github.com/ratelimit-go/ratelimit/cmd/ratelimitd

go 1.26.0

require (
	github.com/envoyproxy/go-control-plane/envoy v1.36.0
	github.com/hashicorp/golang-lru/v2 v2.0.7
	github.com/ratelimit-go/ratelimit v0.0.0-00010101000000-000000000000
	github.com/ratelimit-go/ratelimit/backend/redis v0.0.0-00010101000000-000000000000
	github.com/ratelimit-go/ratelimit/backend/valkey v0.0.0-00010101000000-000000000000
	github.com/ratelimit-go/ratelimit/servertest v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
	golang.org/x/net v0.42.0
	google.golang.org/grpc v1.75.1
	google.golang.org/protobuf v1.36.10
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.62.0 // indirect
	github.com/prometheus/procfs v0.15.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/cncf/xds/go v0.0.0-20250501225837-2ac532fd4443 // indirect
	github.com/envoyproxy/protoc-gen-validate v1.2.1 // indirect
	github.com/planetscale/vtprotobuf v0.6.1-0.20240319094008-0393e58bdf10 // indirect
	github.com/prometheus/client_golang v1.22.0
	github.com/ratelimit-go/ratelimit/promlimit v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	github.com/rogpeppe/go-internal v1.12.0 // indirect
	github.com/valkey-io/valkey-go v1.0.69
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.27.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250728155136-f173205681a0 // indirect
)

// This module lives in the ratelimit repository and is developed against
// its root: replace the root module by the directory two levels up.
replace github.com/ratelimit-go/ratelimit => ../..

replace github.com/ratelimit-go/ratelimit/promlimit => ../../promlimit

replace github.com/ratelimit-go/ratelimit/backend/redis => ../../backend/redis

replace github.com/ratelimit-go/ratelimit/backend/valkey => ../../backend/valkey

replace github.com/ratelimit-go/ratelimit/servertest => ../../servertest
