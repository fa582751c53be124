package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// envoyproxy/ratelimit's variables become flags where ratelimitd's own say
// nothing; what it cannot honour is refused or noted.
func TestEnvoyproxysEnvironmentBecomesFlags(t *testing.T) {
	o, err := parseFlags(nil, env(map[string]string{
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "REDIS_AUTH": "s3cret", "REDIS_POOL_SIZE": "20",
		"PORT": "8080", "GRPC_PORT": "8081", "LOG_LEVEL": "DEBUG", "LOG_FORMAT": "json", "USE_STATSD": "true",
		"NEAR_LIMIT_RATIO": "0.9", "DEBUG_PORT": "6071", "GRPC_MAX_CONNECTION_AGE": "1h", "GRPC_MAX_CONNECTION_AGE_GRACE": "30s",
	}), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "/data/ratelimit/config", o.config)
	assert.Equal(t, "0.0.0.0:6071", o.admin, "its debug port: the probes' and metrics' own listener")
	assert.Equal(t, [2]time.Duration{time.Hour, 30 * time.Second}, [2]time.Duration{o.grpcAge, o.grpcGrace})
	assert.Equal(t, "redis://:s3cret@redis:6379?pool_size=20", o.store)
	assert.Equal(t, "0.0.0.0:8080", o.httpAddr)
	assert.Equal(t, "0.0.0.0:8081", o.grpcAddr)
	assert.True(t, o.logJSON)
	assert.Equal(t, "DEBUG", o.logLevel.String())
	assert.Len(t, o.envNotes, 1, "USE_STATSD: %v", o.envNotes)
	assert.Equal(t, 0.9, o.nearLimitRatio)

	assert.True(t, o.countOverLimit, "started from its environment, every hit counts, as its default")
	assert.False(t, o.shadowMode || o.quotaMode || o.dynamicMetadata || o.ietfHeaders)
	assert.Nil(t, o.limitHeaders, "no header unless LIMIT_RESPONSE_HEADERS_ENABLED")

	o, err = parseFlags(nil, env(map[string]string{
		"RUNTIME_ROOT": "/d", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true", "SHADOW_MODE": "true", "QUOTA_MODE": "true",
		"RESPONSE_DYNAMIC_METADATA": "true", "LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_RESET_HEADER": "X-Reset",
	}), io.Discard)
	require.NoError(t, err)
	assert.False(t, o.countOverLimit, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: a denial counts nothing")
	assert.True(t, o.shadowMode && o.quotaMode && o.dynamicMetadata)
	assert.Equal(t, []string{"RateLimit-Limit", "RateLimit-Remaining", "X-Reset"}, o.limitHeaders)
	assert.Empty(t, o.envNotes, "every one honoured")

	o, err = parseFlags([]string{"-config", "c.yaml"}, env(nil), io.Discard)
	require.NoError(t, err)
	assert.False(t, o.countOverLimit, "ratelimitd's own default: a denial counts nothing")
	o, err = parseFlags([]string{"-count-over-limit=false"}, env(map[string]string{"RUNTIME_ROOT": "/d"}), io.Discard)
	require.NoError(t, err)
	assert.False(t, o.countOverLimit, "its own flag wins over the environment's default")

	o, err = parseFlags([]string{"-store", "memory"}, env(map[string]string{
		"RUNTIME_ROOT": "/data", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "a:1,b:2", "REDIS_TYPE": "cluster",
		"RATELIMITD_CONFIG": "mine.yaml",
	}), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "memory", o.store, "a flag wins")
	assert.Equal(t, "mine.yaml", o.config, "ratelimitd's own variable wins")

	o, err = parseFlags(nil, env(map[string]string{"RUNTIME_ROOT": "/d", "REDIS_URL": "/var/run/r.sock"}), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "unix:///var/run/r.sock", o.store, "envoyproxy/ratelimit's default socket type")

	o, err = parseFlags(nil, env(map[string]string{"RUNTIME_ROOT": "/d", "REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster,s1:26379,s2:26379",
		"REDIS_AUTH": "app:pw", "REDIS_SENTINEL_AUTH": "spw", "REDIS_POOL_SIZE": "8"}), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "redis-sentinel://:spw@s1:26379,s2:26379?master_name=mymaster&password=pw&pool_size=8&username=app", o.store,
		"REDIS_TYPE=sentinel: the master's name, the sentinels, both passwords")
	assert.Equal(t, "redis-sentinel://:xxxxx@s1:26379,s2:26379?master_name=mymaster&password=xxxxx&pool_size=8&username=app", redact(o.store))

	for _, bad := range []map[string]string{
		{"RUNTIME_ROOT": "/d", "BACKEND_TYPE": "memcache"},
		{"RUNTIME_ROOT": "/d", "GRPC_UDS": "/tmp/rl.sock"},
		{"RUNTIME_ROOT": "/d", "REDIS_URL": "r:1", "REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "SENTINEL"},
		{"RUNTIME_ROOT": "/d", "REDIS_URL": "r:1", "REDIS_TLS": "true", "REDIS_TLS_CACERT": "/ca.pem"},
		{"RUNTIME_ROOT": "/d", "CONFIG_TYPE": "GRPC_XDS_SOTW"},
		{"RUNTIME_ROOT": "/d", "GRPC_SERVER_USE_TLS": "true"}, // never plaintext where TLS was asked for
	} {
		_, err := parseFlags(nil, env(bad), io.Discard)
		assert.ErrorIs(t, err, errUsage, "%v", bad)
	}
}

// The environment that starts envoyproxy/ratelimit, and no argument,
// starts ratelimitd: the same config directory and store, its probe path
// and its JSON path, Envoy's requests answered.
func TestStartsFromEnvoyproxysEnvironment(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	writeConfig(t, filepath.Join(dir, "config.yaml"), "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")
	redis := testserver.Get(t, testserver.Redis).Addr
	d := startWith(t, []string{
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redis, "USE_STATSD=false",
		"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "LOG_LEVEL=debug", "LOG_FORMAT=json",
	}, nil)
	code, body := d.get(t, "/healthcheck")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "OK", body)
	client := "10.0.0.1-" + strconv.FormatInt(time.Now().UnixNano(), 36) // fresh on a shared server
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		res, err := d.ask(context.Background(), "edge", []string{"remote_address", client})
		require.NoError(t, err)
		assert.Equal(t, want, res.OverallCode, "request %d", i+1)
	}
	resp, err := http.Post("http://"+d.http+"/json", "application/json",
		strings.NewReader(`{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "`+client+`"}]}]}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the same key, over its limit, through /json")
	assert.Contains(t, d.logs(), `"store":"redis://`+redis, "the store of REDIS_URL")
	assert.Contains(t, d.logs(), "RUNTIME_WATCH_ROOT: ignored")
}

// Every variable of envoyproxy/ratelimit's settings at the pinned commit is
// accounted for: docs/service.md's table names it, and set, it is honoured
// (the options change), refused at start, or logged as ignored; none is
// silently unread.
func TestEveryUpstreamVariableIsAccountedFor(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(upstream, "settings-vars.txt"))
	require.NoError(t, err)
	assert.Equal(t, strings.Fields(string(data)), upstreamSettings, "the list in envoyvars.go is upstream's")

	doc, err := os.ReadFile("../../docs/service.md")
	require.NoError(t, err)
	var named []string // every `NAME` and `NAME*` pattern the docs hold
	for _, m := range regexp.MustCompile("`([A-Z][A-Z0-9_*]+)(=[^`]*)?`").FindAllStringSubmatch(string(doc), -1) {
		named = append(named, m[1])
	}
	base, err := parseFlags(nil, env(map[string]string{"RUNTIME_ROOT": "/d"}), io.Discard)
	require.NoError(t, err)
	for _, k := range upstreamSettings {
		inDocs := slices.ContainsFunc(named, func(p string) bool { ok, _ := path.Match(p, k); return ok })
		assert.True(t, inDocs, "%s is not in docs/service.md's table", k)
		accounted := false
		for _, v := range []string{"true", "false"} { // a value may be the environment's default: one of two is not
			o, err := parseFlags(nil, env(map[string]string{"RUNTIME_ROOT": "/d", k: v}), io.Discard)
			noted := slices.ContainsFunc(o.envNotes, func(n string) bool { return strings.HasPrefix(n, k) })
			o.envNotes, base.envNotes = nil, nil
			accounted = accounted || err != nil || noted || !reflect.DeepEqual(o, base)
		}
		assert.True(t, accounted, "%s is neither honoured, refused nor logged", k)
	}
}
