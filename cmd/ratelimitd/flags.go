package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/service"
)

// options are the command line's; each flag may also come from the
// environment variable RATELIMITD_ and its name in capitals, '-' as '_'
// (RATELIMITD_NEAR_CACHE=0): a flag given on the command line wins.
type options struct {
	config    string
	grpcAddr  string
	httpAddr  string
	store     string
	instances int
	noGuard   bool
	nearCache int
	// autoPipeline sends a go-redis store's decisions through go-redis's
	// auto-pipeliner (redis.WithAutoPipeline).
	autoPipeline bool
	timeout      time.Duration
	// rlqsTTL serves Envoy's Rate Limit Quota Service, its assignments
	// living this long (0: not served).
	rlqsTTL time.Duration
	drain   time.Duration
	// shutdownDelay is how long the process keeps serving, not ready,
	// after SIGTERM before its listeners close.
	shutdownDelay time.Duration
	reload        time.Duration
	settle        time.Duration // a changed configuration must hold still this long
	logLevel      slog.Level
	logJSON       bool
	// maxDescriptors and maxEntries bound each request (service.Limits).
	maxDescriptors, maxEntries int
	// httpTimeout bounds reading a request and writing its answer;
	// httpIdle, a kept-alive connection's wait for its next request;
	// httpConns, the HTTP connections open at once (0: no bound).
	httpTimeout, httpIdle time.Duration
	httpConns             int
	// grpcStreams bounds the streams one gRPC connection may have open,
	// grpcConns the gRPC connections open at once (0: no bound),
	// grpcIdle how long one may stay without a stream, and grpcAge and
	// grpcAgeGrace how long one may live, and then finish its streams.
	grpcStreams, grpcConns       int
	grpcIdle, grpcAge, grpcGrace time.Duration
	// admin is the address of the health, readiness and metrics
	// listener, apart from -http's public API ("": none).
	admin string
	// detailedValues bounds the descriptor values a detailed_metric rule
	// has series for.
	detailedValues int
	// maxKeys and refuseWhenFull configure the memory stores (the store,
	// and the guard's fallback).
	maxKeys        int
	refuseWhenFull bool
	// strictDomains answers an unknown domain NotFound (-unknown-domain).
	strictDomains bool
	// grpcTLS: the gRPC listener's certificate and key files, and for
	// mTLS the clients' CA file and the SAN a client's certificate must
	// hold (see tls.go).
	grpcTLS grpcTLS
	// check is a configuration to check and print, then exit (-check).
	check string
	// ignoreDotfiles and mergeDomains: how the configuration directory
	// is read (config.LoadOption); startWithoutConfig serves with no
	// domain while the configuration's path does not exist.
	ignoreDotfiles, mergeDomains, startWithoutConfig bool
	// nearLimitRatio is where envoyproxy/ratelimit's near_limit counts
	// from, a share of the limit.
	nearLimitRatio float64
	// healthyNeedsDomain keeps the probes not ready while no domain is
	// configured.
	healthyNeedsDomain bool
	// countOverLimit, quotaMode, shadowMode: see service.Options.
	countOverLimit, quotaMode, shadowMode bool
	// ietfHeaders, limitHeaders and dynamicMetadata: what a gRPC answer
	// carries beside the decision (service.RLSOption); limitHeaders are
	// the three names of envoyproxy/ratelimit's headers, or none.
	ietfHeaders, dynamicMetadata bool
	limitHeaders                 []string
	// envNotes are envoyproxy/ratelimit variables set and not honoured,
	// logged at start.
	envNotes []string
}

// errUsage is a command line that cannot run; main exits 2 on it.
var errUsage = errors.New("usage")

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("ratelimitd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.config, "config", "", "the configuration: a YAML file, or a directory of them (required)")
	fs.StringVar(&o.grpcAddr, "grpc", ":8081", "address of Envoy's rate limit service (gRPC) and gRPC health")
	fs.StringVar(&o.httpAddr, "http", ":8080", "address of /v1/allow, /healthz, /readyz and /metrics")
	fs.StringVar(&o.store, "store", "memory", "memory, redis://host:port, redis-cluster://h1:p1,h2:p2, valkey://host:port (options as query parameters)")
	fs.IntVar(&o.instances, "instances", 1, "ratelimitd instances sharing the store: while it is down, each decides Limit/instances locally")
	fs.BoolVar(&o.noGuard, "no-guard", false, "on a server store, fail (Envoy's failure_mode_deny decides) instead of deciding locally while the store is down")
	fs.IntVar(&o.nearCache, "near-cache", 10_000, "on a server store, denials answered in process until they expire (keys; 0: none)")
	fs.BoolVar(&o.autoPipeline, "redis-auto-pipeline", true, "redis, redis-cluster and redis-sentinel stores: the decisions of concurrent requests share one write and one read (go-redis's auto-pipeliner); false: a connection and a round trip each")
	fs.DurationVar(&o.timeout, "timeout", 100*time.Millisecond, "bound on one decision's store call")
	fs.DurationVar(&o.rlqsTTL, "rlqs-ttl", 0, "serve Envoy's Rate Limit Quota Service on the gRPC listener (a preview; on a server store every instance shares one allocation), its assignments living this long: a reporting interval and a half or more (0: not served)")
	fs.DurationVar(&o.drain, "drain", 10*time.Second, "on SIGTERM or SIGINT, how long requests in flight may take before the process exits")
	fs.DurationVar(&o.shutdownDelay, "shutdown-delay", 0, "on SIGTERM or SIGINT, how long readiness fails while requests are still served, before the listeners close (Kubernetes: the readiness probe's period or more)")
	fs.DurationVar(&o.reload, "reload-every", 500*time.Millisecond, "how often the configuration is checked for changes (0: never)")
	fs.DurationVar(&o.settle, "reload-settle", 3*time.Second, "a changed configuration is applied once unchanged this long (a file written in steps within it is never applied half-written; write files atomically); a symlink swap is applied at once")
	fs.IntVar(&o.maxDescriptors, "max-descriptors", service.DefaultMaxDescriptors, "descriptors a request may carry; more is InvalidArgument (400) at once")
	fs.IntVar(&o.maxEntries, "max-entries", service.DefaultMaxEntries, "entries a descriptor may carry; more is InvalidArgument (400) at once")
	fs.DurationVar(&o.httpTimeout, "http-timeout", 10*time.Second, "HTTP: bound on reading a request (headers and body) and on writing its answer")
	fs.DurationVar(&o.httpIdle, "http-idle-timeout", time.Minute, "HTTP: how long a kept-alive connection may wait for its next request")
	fs.IntVar(&o.httpConns, "http-max-conns", 1024, "HTTP connections open at once; more wait to be accepted (the gRPC listener is apart; 0: no bound)")
	fs.IntVar(&o.grpcStreams, "grpc-max-streams", 100, "gRPC: streams (requests in flight) one connection may hold; more wait, or are refused (REFUSED_STREAM)")
	fs.IntVar(&o.grpcConns, "grpc-max-conns", 4096, "gRPC connections open at once; more wait to be accepted (0: no bound)")
	fs.DurationVar(&o.grpcIdle, "grpc-idle-timeout", 5*time.Minute, "gRPC: how long a connection with no request in flight stays open")
	fs.DurationVar(&o.grpcAge, "grpc-max-conn-age", 24*time.Hour, "gRPC: how long a connection lives before the server asks the client to reconnect (envoyproxy/ratelimit's GRPC_MAX_CONNECTION_AGE)")
	fs.DurationVar(&o.grpcGrace, "grpc-max-conn-age-grace", time.Hour, "gRPC: how long a connection past its age may finish its requests (GRPC_MAX_CONNECTION_AGE_GRACE)")
	fs.StringVar(&o.admin, "admin", ":6070", "address of /healthz, /readyz, /healthcheck and /metrics on a listener of their own, which no public client's connections can starve (\"\": none; they stay on -http too)")
	fs.IntVar(&o.detailedValues, "detailed-max-values", 1000, "descriptor values a detailed_metric rule has series for; later ones are counted under descriptor=\"other\"")
	fs.IntVar(&o.maxKeys, "max-keys", memory.DefaultMaxKeys, "keys a memory store holds (the store, and the guard's fallback)")
	whenFull := fs.String("when-full", "evict", "a full memory store's answer to a new key: evict (the least recently used key forgets its history) or refuse (Unavailable; Envoy's failure mode decides)")
	unknownDomain := fs.String("unknown-domain", "ok", "a request for a domain the configuration lacks: ok (not limited, counted: envoyproxy/ratelimit's answer) or notfound (NotFound, 404)")
	fs.StringVar(&o.grpcTLS.cert, "grpc-tls-cert", "", "gRPC over TLS: the certificate chain file (PEM), reloaded when it changes; with -grpc-tls-key")
	fs.StringVar(&o.grpcTLS.key, "grpc-tls-key", "", "gRPC over TLS: the private key file (PEM)")
	fs.StringVar(&o.grpcTLS.clientCA, "grpc-client-ca", "", "gRPC mTLS: the CA file (PEM) a client's certificate must chain to; clients without one are refused")
	fs.StringVar(&o.grpcTLS.clientSAN, "grpc-client-san", "", "gRPC mTLS: a subject alternative name (DNS or URI) a client's certificate must hold")
	fs.StringVar(&o.check, "check", "", "check the configuration at this path (a file or directory, read as -config would be), print its rules and exit: 0 when it loads, 1 with the file, line and problem when not (envoyproxy/ratelimit's config_check_cmd)")
	fs.BoolVar(&o.ignoreDotfiles, "ignore-dotfiles", false, "in a configuration directory, skip files and directories whose names start with a dot (RUNTIME_IGNOREDOTFILES)")
	fs.BoolVar(&o.mergeDomains, "merge-domains", false, "files configuring one domain merge into it instead of being refused (MERGE_DOMAIN_CONFIG)")
	fs.BoolVar(&o.startWithoutConfig, "start-without-config", false, "when -config does not exist, serve with no domain (every one unknown) and load it once it appears, as envoyproxy/ratelimit does")
	fs.Float64Var(&o.nearLimitRatio, "near-limit-ratio", 0.8, "the share of a limit from which ratelimit_service_rate_limit_near_limit counts hits (NEAR_LIMIT_RATIO)")
	fs.BoolVar(&o.healthyNeedsDomain, "healthy-needs-domain", false, "readiness (/readyz, /healthcheck, gRPC health) fails while the configuration in force has no domain (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED)")
	fs.BoolVar(&o.countOverLimit, "count-over-limit", false, "count every hit, a denied request's included, as envoyproxy/ratelimit does (false: a request a limit denies consumes nothing from any; started from envoyproxy/ratelimit's environment, its STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT decides)")
	fs.BoolVar(&o.quotaMode, "quota-mode", false, "every rule a quota pool: a request is over only when every pool it matches is spent (QUOTA_MODE)")
	fs.BoolVar(&o.shadowMode, "shadow-mode", false, "answer OK to every request, each decided and counted as usual (SHADOW_MODE)")
	fs.BoolVar(&o.ietfHeaders, "ietf-headers", false, "gRPC answers carry the IETF draft's RateLimit-Policy and RateLimit fields, and Retry-After when over, for Envoy to add")
	limitHeaders := fs.String("limit-headers", "", "gRPC answers carry envoyproxy/ratelimit's three headers under these names: limit,remaining,reset (LIMIT_RESPONSE_HEADERS_ENABLED; \"\": none)")
	fs.BoolVar(&o.dynamicMetadata, "dynamic-metadata", false, "gRPC answers carry Envoy dynamic metadata as envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA: the request, and the metadata of the rules that did not deny")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	format := fs.String("log-format", "text", "text or json")
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("%w: %w", errUsage, err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		env := "RATELIMITD_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(env); v != "" && !set[f.Name] {
			if err := f.Value.Set(v); err != nil && envErr == nil {
				envErr = fmt.Errorf("%w: %s=%q: %w", errUsage, env, v, err)
			}
		}
	})
	envoy, notes, err := envoyVars(getenv)
	if err != nil {
		return o, fmt.Errorf("%w: envoyproxy/ratelimit's environment: %w", errUsage, err)
	}
	o.envNotes = notes
	for name, v := range envoy { // its variables, where ratelimitd's own say nothing
		env := "RATELIMITD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if set[name] || getenv(env) != "" {
			continue
		}
		if err := fs.Set(name, v); err != nil && envErr == nil {
			envErr = fmt.Errorf("%w: envoyproxy/ratelimit's environment, as -%s %q: %w", errUsage, name, v, err)
		}
	}
	switch {
	case envErr != nil:
		return o, envErr
	case fs.NArg() > 0:
		return o, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	case o.check != "":
		o.config = o.check
	case o.config == "":
		return o, fmt.Errorf("%w: -config is required (or RATELIMITD_CONFIG, or envoyproxy/ratelimit's RUNTIME_ROOT)", errUsage)
	case o.instances < 1:
		return o, fmt.Errorf("%w: -instances must be at least 1", errUsage)
	case *unknownDomain != "ok" && *unknownDomain != "notfound":
		return o, fmt.Errorf("%w: -unknown-domain %q: ok or notfound", errUsage, *unknownDomain)
	case *whenFull != "evict" && *whenFull != "refuse":
		return o, fmt.Errorf("%w: -when-full %q: evict or refuse", errUsage, *whenFull)
	case (o.grpcTLS.cert == "") != (o.grpcTLS.key == ""):
		return o, fmt.Errorf("%w: -grpc-tls-cert and -grpc-tls-key go together", errUsage)
	case o.grpcTLS.cert == "" && (o.grpcTLS.clientCA != "" || o.grpcTLS.clientSAN != ""):
		return o, fmt.Errorf("%w: -grpc-client-ca and -grpc-client-san need -grpc-tls-cert and -grpc-tls-key", errUsage)
	case o.grpcTLS.clientSAN != "" && o.grpcTLS.clientCA == "":
		return o, fmt.Errorf("%w: -grpc-client-san needs -grpc-client-ca", errUsage)
	case o.nearLimitRatio < 0 || o.nearLimitRatio > 1:
		return o, fmt.Errorf("%w: -near-limit-ratio %v: from 0 to 1", errUsage, o.nearLimitRatio)
	case o.maxKeys < 1:
		return o, fmt.Errorf("%w: -max-keys must be at least 1", errUsage)
	case o.detailedValues < 1:
		return o, fmt.Errorf("%w: -detailed-max-values must be at least 1", errUsage)
	case o.grpcStreams < 1 || o.grpcConns < 0 || o.grpcIdle <= 0 || o.grpcAge <= 0 || o.grpcGrace <= 0:
		return o, fmt.Errorf("%w: -grpc-max-streams must be at least 1, -grpc-max-conns not negative, -grpc-idle-timeout, -grpc-max-conn-age and -grpc-max-conn-age-grace positive", errUsage)
	case o.httpTimeout <= 0 || o.httpIdle <= 0 || o.httpConns < 0:
		return o, fmt.Errorf("%w: -http-timeout and -http-idle-timeout must be positive, -http-max-conns not negative", errUsage)
	case o.maxDescriptors < 1 || o.maxEntries < 1:
		return o, fmt.Errorf("%w: -max-descriptors and -max-entries must be at least 1", errUsage)
	case o.nearCache < 0 || o.timeout <= 0 || o.rlqsTTL < 0 || o.drain < 0 || o.reload < 0 || o.settle < 0 || o.shutdownDelay < 0:
		return o, fmt.Errorf("%w: -near-cache, -timeout, -drain, -reload-every, -reload-settle and -shutdown-delay cannot be negative (-timeout not 0)", errUsage)
	}
	if err := o.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return o, fmt.Errorf("%w: -log-level: %w", errUsage, err)
	}
	switch *format {
	case "text", "json":
		o.logJSON = *format == "json"
	default:
		return o, fmt.Errorf("%w: -log-format %q: text or json", errUsage, *format)
	}
	if *limitHeaders != "" {
		o.limitHeaders = strings.Split(*limitHeaders, ",")
		if len(o.limitHeaders) != 3 || slices.Contains(o.limitHeaders, "") {
			return o, fmt.Errorf("%w: -limit-headers %q: three names, limit,remaining,reset", errUsage, *limitHeaders)
		}
	}
	o.refuseWhenFull = *whenFull == "refuse"
	o.strictDomains = *unknownDomain == "notfound"
	return o, nil
}

// loadOptions are how the flags ask the configuration to be read.
func (o options) loadOptions() []config.LoadOption {
	var opts []config.LoadOption
	if o.ignoreDotfiles {
		opts = append(opts, config.IgnoreDotfiles())
	}
	if o.mergeDomains {
		opts = append(opts, config.MergeDomains())
	}
	return opts
}

// rlsOptions are what the flags ask gRPC answers to carry.
func (o options) rlsOptions() []service.RLSOption {
	var opts []service.RLSOption
	if o.ietfHeaders {
		opts = append(opts, service.WithIETFHeaders())
	}
	if o.limitHeaders != nil {
		opts = append(opts, service.WithUpstreamHeaders(o.limitHeaders[0], o.limitHeaders[1], o.limitHeaders[2]))
	}
	if o.dynamicMetadata {
		opts = append(opts, service.WithDynamicMetadata())
	}
	return opts
}

// memoryOptions are the memory stores' options the flags set.
func (o options) memoryOptions() []memory.Option {
	whenFull := memory.EvictLeastRecent
	if o.refuseWhenFull {
		whenFull = memory.RefuseNewKeys
	}
	return []memory.Option{memory.WithMaxKeys(o.maxKeys), memory.WithWhenFull(whenFull)}
}

func newLogger(o options, w io.Writer) *slog.Logger {
	ho := &slog.HandlerOptions{Level: o.logLevel}
	if o.logJSON {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}
