module github.com/ratelimit-go/ratelimit/backend/valkey

go 1.23.0

// This module lives in the ratelimit repository and is developed against
// its root: replace the root module by the directory two levels up.
replace github.com/ratelimit-go/ratelimit => ../..

require (
	github.com/ratelimit-go/ratelimit v0.0.0-00010101000000-000000000000
	github.com/valkey-io/valkey-go v1.0.69
)

require (
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
	golang.org/x/sys v0.31.0 // indirect
)
