package main

import (
	"io"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestFlagsComeFromTheCommandLineOrTheEnvironment(t *testing.T) {
	o, err := parseFlags([]string{"-config", "c.yaml"}, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, options{config: "c.yaml", grpcAddr: ":8081", httpAddr: ":8080", store: "memory", instances: 1,
		nearCache: 10_000, autoPipeline: true, nearLimitRatio: 0.8, timeout: 100 * time.Millisecond, drain: 10 * time.Second, reload: 500 * time.Millisecond, settle: 3 * time.Second,
		maxDescriptors: 64, maxEntries: 16, httpTimeout: 10 * time.Second, httpIdle: time.Minute, httpConns: 1024,
		grpcStreams: 100, grpcConns: 4096, grpcIdle: 5 * time.Minute, grpcAge: 24 * time.Hour, grpcGrace: time.Hour, admin: ":6070",
		detailedValues: 1000, maxKeys: 100_000}, o, "the defaults")

	o, err = parseFlags([]string{"-instances", "3"}, env(map[string]string{
		"RATELIMITD_CONFIG": "/etc/rl", "RATELIMITD_STORE": "redis://r:6379", "RATELIMITD_INSTANCES": "9",
		"RATELIMITD_NEAR_CACHE": "0", "RATELIMITD_NO_GUARD": "true", "RATELIMITD_LOG_LEVEL": "debug", "RATELIMITD_LOG_FORMAT": "json",
	}), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "/etc/rl", o.config)
	assert.Equal(t, "redis://r:6379", o.store)
	assert.Equal(t, 3, o.instances, "the command line wins")
	assert.Zero(t, o.nearCache)
	assert.True(t, o.noGuard)
	assert.Equal(t, slog.LevelDebug, o.logLevel)
	assert.True(t, o.logJSON)
}

func TestABadCommandLineIsAUsageError(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
	}{
		"no config":           {nil, nil},
		"unknown flag":        {[]string{"-config", "c", "-nope"}, nil},
		"an argument":         {[]string{"-config", "c", "extra"}, nil},
		"no instances":        {[]string{"-config", "c", "-instances", "0"}, nil},
		"a negative cache":    {[]string{"-config", "c", "-near-cache", "-1"}, nil},
		"a negative RLQS TTL": {[]string{"-config", "c", "-rlqs-ttl", "-1s"}, nil},
		"a zero timeout":      {[]string{"-config", "c", "-timeout", "0s"}, nil},
		"a bad level":         {[]string{"-config", "c", "-log-level", "loud"}, nil},
		"a bad format":        {[]string{"-config", "c", "-log-format", "xml"}, nil},
		"a bad environment":   {[]string{"-config", "c"}, map[string]string{"RATELIMITD_INSTANCES": "many"}},
	} {
		_, err := parseFlags(tc.args, env(tc.env), io.Discard)
		assert.ErrorIs(t, err, errUsage, name)
	}
}

func TestStoreURLs(t *testing.T) {
	u, err := url.Parse("redis-cluster://a:1,b:2,c:3?pool_size=4")
	require.NoError(t, err)
	assert.Equal(t, "redis://a:1?addr=b%3A2&addr=c%3A3&pool_size=4", clusterURL(u))
	u, err = url.Parse("valkeys://a:1")
	require.NoError(t, err)
	assert.Equal(t, "rediss://a:1", clusterURL(u))
	assert.Equal(t, "redis://u:xxxxx@h:1", redact("redis://u:secret@h:1"))

	_, err = openStore("mongodb://h", options{instances: 1}, nil, slog.Default())
	assert.ErrorIs(t, err, errStoreURL)
	_, err = openStore("redis://h:1/notadb", options{instances: 1}, nil, slog.Default())
	assert.ErrorIs(t, err, errStoreURL)

	// A URL that does not parse once went to the log with its password.
	for _, raw := range []string{"redis://u:s3cret@[::1:6379", "redis://u:s3cret@h:1/notadb", "redis://:s3cret@h%zz:1"} {
		_, err = openStore(raw, options{instances: 1, maxKeys: 100}, nil, slog.Default())
		require.ErrorIs(t, err, errStoreURL, raw)
		assert.NotContains(t, err.Error(), "s3cret", raw)
		assert.NotContains(t, redact(raw), "s3cret", raw)
	}
}
