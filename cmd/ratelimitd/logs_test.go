package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// go-redis's lines come out in the service's format (JSON here), marked
// with their client.
func TestClientLogLinesUseTheServicesFormat(t *testing.T) {
	var out bytes.Buffer
	o, err := parseFlags([]string{"-config", "c.yaml", "-log-format", "json"}, env(nil), nil)
	require.NoError(t, err)
	clientLog{newLogger(o, &out)}.Printf(context.Background(), "redis: %s:%d: connection pool: failed to dial\n", "127.0.0.1", 6379)
	var line map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &line), out.String())
	assert.Equal(t, "redis: 127.0.0.1:6379: connection pool: failed to dial", line["msg"])
	assert.Equal(t, "go-redis", line["client"])
	assert.Equal(t, "WARN", line["level"])
}
