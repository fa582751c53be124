//go:build tools

// The peer's command, so that go.mod pins the version `go build` builds.
package main

import _ "github.com/envoyproxy/ratelimit/src/service_cmd"
