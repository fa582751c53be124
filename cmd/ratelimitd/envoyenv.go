package main

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
)

// envoyproxy/ratelimit is configured by environment variables; ratelimitd
// reads the ones it can honour, so that the environment that starts
// envoyproxy/ratelimit starts ratelimitd. docs/service.md has a table of
// every one of its variables: read, mapped, or refused and why.

// envoyVars are the flag values envoyproxy/ratelimit's environment sets,
// by flag name; notes say what was set and is not honoured (logged at
// start); an error refuses to start where going on would not serve what
// the environment asks (a memcache backend, a unix socket for gRPC, TLS
// files for Redis).
func envoyVars(getenv func(string) string) (flags map[string]string, notes []string, err error) {
	raw, read := getenv, map[string]bool{}
	getenv = func(k string) string { read[k] = true; return raw(k) } // what is read is honoured or refused
	flags = map[string]string{}
	has := func(k string) bool { return getenv(k) != "" }
	or := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	if has("RUNTIME_ROOT") || has("RUNTIME_SUBDIRECTORY") || has("RUNTIME_APPDIRECTORY") {
		flags["config"] = filepath.Join(or("RUNTIME_ROOT", "/srv/runtime_data/current"), getenv("RUNTIME_SUBDIRECTORY"), or("RUNTIME_APPDIRECTORY", "config"))
	}
	if has("HOST") || has("PORT") {
		flags["http"] = net.JoinHostPort(or("HOST", "0.0.0.0"), or("PORT", "8080"))
	}
	if has("GRPC_HOST") || has("GRPC_PORT") {
		flags["grpc"] = net.JoinHostPort(or("GRPC_HOST", "0.0.0.0"), or("GRPC_PORT", "8081"))
	}
	if has("DEBUG_HOST") || has("DEBUG_PORT") {
		flags["admin"] = net.JoinHostPort(or("DEBUG_HOST", "0.0.0.0"), or("DEBUG_PORT", "6070"))
	}
	for env, flag := range map[string]string{"GRPC_MAX_CONNECTION_AGE": "grpc-max-conn-age", "GRPC_MAX_CONNECTION_AGE_GRACE": "grpc-max-conn-age-grace"} {
		if has(env) {
			flags[flag] = getenv(env)
		}
	}
	if v := getenv("CONFIG_TYPE"); v != "" && !strings.EqualFold(v, "FILE") {
		return nil, nil, fmt.Errorf("CONFIG_TYPE=%s: ratelimitd reads its configuration from files", v)
	}
	for env, flag := range map[string]string{"SHADOW_MODE": "shadow-mode", "QUOTA_MODE": "quota-mode", "RESPONSE_DYNAMIC_METADATA": "dynamic-metadata",
		"RUNTIME_IGNOREDOTFILES": "ignore-dotfiles", "MERGE_DOMAIN_CONFIG": "merge-domains", "FORCE_START_WITHOUT_INITIAL_CONFIG": "start-without-config",
		"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "healthy-needs-domain", "NEAR_LIMIT_RATIO": "near-limit-ratio"} {
		if has(env) {
			flags[flag] = getenv(env)
		}
	}
	if strings.EqualFold(getenv("LIMIT_RESPONSE_HEADERS_ENABLED"), "true") {
		flags["limit-headers"] = or("LIMIT_LIMIT_HEADER", "RateLimit-Limit") + "," + or("LIMIT_REMAINING_HEADER", "RateLimit-Remaining") + "," + or("LIMIT_RESET_HEADER", "RateLimit-Reset")
	}
	if has("GRPC_UDS") {
		return nil, nil, fmt.Errorf("GRPC_UDS: ratelimitd serves gRPC on TCP only (-grpc)")
	}
	switch strings.ToLower(or("BACKEND_TYPE", "redis")) {
	case "redis":
	default:
		return nil, nil, fmt.Errorf("BACKEND_TYPE=%s: ratelimitd decides on memory, Redis or Valkey (-store)", getenv("BACKEND_TYPE"))
	}
	if has("REDIS_URL") || has("REDIS_SOCKET_TYPE") {
		store, err := redisStoreURL(getenv)
		if err != nil {
			return nil, nil, err
		}
		flags["store"] = store
	}
	if v := getenv("LOG_LEVEL"); v != "" {
		switch l := strings.ToLower(v); l {
		case "trace", "debug":
			flags["log-level"] = "debug"
		case "info", "warn", "error":
			flags["log-level"] = l
		case "warning":
			flags["log-level"] = "warn"
		case "fatal", "panic":
			flags["log-level"] = "error"
		default:
			notes = append(notes, fmt.Sprintf("LOG_LEVEL=%s is none of debug, info, warn, error: ignored", v))
		}
	}
	switch v := strings.ToLower(getenv("LOG_FORMAT")); v {
	case "json", "text":
		flags["log-format"] = v
	case "":
	default:
		notes = append(notes, fmt.Sprintf("LOG_FORMAT=%s is neither json nor text: ignored", v))
	}
	if strings.EqualFold(getenv("GRPC_SERVER_USE_TLS"), "true") {
		if !has("GRPC_SERVER_TLS_CERT") || !has("GRPC_SERVER_TLS_KEY") {
			return nil, nil, fmt.Errorf("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
		}
		flags["grpc-tls-cert"], flags["grpc-tls-key"] = getenv("GRPC_SERVER_TLS_CERT"), getenv("GRPC_SERVER_TLS_KEY")
		if has("GRPC_CLIENT_TLS_CACERT") {
			flags["grpc-client-ca"] = getenv("GRPC_CLIENT_TLS_CACERT")
		}
		if has("GRPC_CLIENT_TLS_SAN") {
			flags["grpc-client-san"] = getenv("GRPC_CLIENT_TLS_SAN")
		}
	}
	if has("LOCAL_CACHE_SIZE_IN_BYTES") {
		notes = append(notes, "LOCAL_CACHE_SIZE_IN_BYTES: ignored; the near cache is sized in keys (-near-cache)")
	}
	for _, k := range []string{"USE_STATSD", "USE_DOG_STATSD", "USE_PROMETHEUS"} {
		if strings.EqualFold(getenv(k), "true") {
			notes = append(notes, k+": ignored; metrics are Prometheus on /metrics, envoyproxy/ratelimit's names included")
		}
	}
	fromEnvoy := len(flags) > 0
	for _, k := range upstreamSettings {
		fromEnvoy = fromEnvoy || raw(k) != ""
	}
	if fromEnvoy {
		// Started from its environment, count as it counts: every hit,
		// unless STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT (its default false);
		// and serve, every domain unknown, while its directory is missing.
		flags["count-over-limit"] = strconv.FormatBool(!strings.EqualFold(getenv("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"), "true"))
		if _, set := flags["start-without-config"]; !set {
			flags["start-without-config"] = "true"
		}
	}
	for _, k := range upstreamSettings {
		if !read[k] && raw(k) != "" {
			notes = append(notes, k+": ignored (see docs/service.md)")
		}
	}
	return flags, notes, nil
}

// redisStoreURL is the -store URL of envoyproxy/ratelimit's Redis
// variables (its defaults: a unix socket, one server).
func redisStoreURL(getenv func(string) string) (string, error) {
	for _, k := range []string{"REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "REDIS_PERSECOND"} {
		if v := getenv(k); v != "" && !strings.EqualFold(v, "false") {
			return "", fmt.Errorf("%s: not supported; give the store as -store (REDIS_TLS=true with the system's roots is)", k)
		}
	}
	addr := getenv("REDIS_URL")
	if addr == "" {
		addr = "/var/run/nutcracker/ratelimit.sock"
	}
	tls := strings.EqualFold(getenv("REDIS_TLS"), "true")
	u := url.URL{}
	if auth := getenv("REDIS_AUTH"); auth != "" {
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			u.User = url.UserPassword(user, pass)
		} else {
			u.User = url.UserPassword("", auth)
		}
	}
	q := url.Values{}
	if n := getenv("REDIS_POOL_SIZE"); n != "" {
		q.Set("pool_size", n)
	}
	if strings.EqualFold(getenv("REDIS_TYPE"), "sentinel") {
		return sentinelStoreURL(addr, tls, getenv)
	}
	switch strings.ToLower(getenv("REDIS_SOCKET_TYPE")) {
	case "", "unix":
		u.Scheme, u.Path = "unix", addr
	case "tcp":
		switch strings.ToUpper(getenv("REDIS_TYPE")) {
		case "", "SINGLE":
			u.Scheme, u.Host = "redis", addr
		case "CLUSTER":
			u.Scheme, u.Host = "redis-cluster", addr
		default:
			return "", fmt.Errorf("REDIS_TYPE=%s: single, cluster or sentinel", getenv("REDIS_TYPE"))
		}
		if tls {
			u.Scheme = strings.Replace(u.Scheme, "redis", "rediss", 1)
		}
	default:
		return "", fmt.Errorf("REDIS_SOCKET_TYPE=%s: tcp or unix", getenv("REDIS_SOCKET_TYPE"))
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// sentinelStoreURL is the -store URL of REDIS_TYPE=sentinel: REDIS_URL is
// "master,sentinel1,...", REDIS_AUTH the master's password ("user:pass" or
// a password), REDIS_SENTINEL_AUTH the sentinels' (dialled over TCP, as
// envoyproxy/ratelimit dials them).
func sentinelStoreURL(addr string, tls bool, getenv func(string) string) (string, error) {
	master, sentinels, ok := strings.Cut(addr, ",")
	if !ok || master == "" || sentinels == "" {
		return "", fmt.Errorf("REDIS_TYPE=sentinel: REDIS_URL is the master's name and the sentinels, \"master,host:port,...\", not %q", addr)
	}
	u := url.URL{Scheme: "redis-sentinel", Host: sentinels}
	if tls {
		u.Scheme = "rediss-sentinel"
	}
	if auth := getenv("REDIS_SENTINEL_AUTH"); auth != "" {
		u.User = url.UserPassword("", auth)
	}
	q := url.Values{"master_name": {master}}
	if auth := getenv("REDIS_AUTH"); auth != "" {
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			q.Set("username", user)
			auth = pass
		}
		q.Set("password", auth)
	}
	if n := getenv("REDIS_POOL_SIZE"); n != "" {
		q.Set("pool_size", n)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}
