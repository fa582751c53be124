package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"

	goredis "github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/backend/redis"
	"github.com/ratelimit-go/ratelimit/backend/valkey"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/rlqs"
	"github.com/ratelimit-go/ratelimit/guard"
	"github.com/ratelimit-go/ratelimit/nearcache"
	"github.com/ratelimit-go/ratelimit/promlimit"
)

// errStoreURL is wrapped by every error of a -store URL that cannot be used.
var errStoreURL = errors.New("invalid -store")

// ledgerPrefix starts the keys of the Rate Limit Quota Service's shares
// on a server store.
const ledgerPrefix = "ratelimitd:rlqs:"

// stores is what -store built, layered: the server's client, the guard
// (degraded mode) over it, the near cache over that.
type stores struct {
	top     backend.Store
	server  backend.Store // a server's store under every layer (nil: memory)
	ledger  rlqs.Ledger   // where the Rate Limit Quota Service keeps its shares
	guard   *guard.Store  // nil on the memory store or with -guard=false
	memory  *memory.Store
	near    int // the near cache's size, 0 without one
	closers []func() error
}

// Close closes every layer, outermost first.
func (s *stores) Close() error {
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// openStore builds the store -store names:
//
//	memory                                   this process alone (no server)
//	redis://host:port/db?opts                one Redis (go-redis's URL options; -redis-auto-pipeline)
//	redis-cluster://h1:p1,h2:p2?opts         a Redis cluster, through any of its nodes
//	valkey://host:port?addr=h2:p2&opts       Valkey or Redis through valkey-go (a cluster is detected)
//
// rediss, rediss-cluster and valkeys are the same over TLS. On a server the
// guard (degraded mode: a breaker per node and a local fallback deciding
// Limit/instances of each policy) is on unless noGuard, and the near cache
// (denials answered in process) holds nearCache keys (0: none; none under
// -count-over-limit, where no hit is answered in process).
func openStore(raw string, o options, obs *promlimit.Observer, log *slog.Logger) (*stores, error) {
	s, err := openStores(raw, o, obs, log)
	if err != nil {
		return nil, scrub(err, raw)
	}
	return s, nil
}

func openStores(raw string, o options, obs *promlimit.Observer, log *slog.Logger) (*stores, error) {
	s := &stores{}
	if raw == "memory" || raw == "" {
		m, err := memory.New(o.memoryOptions()...)
		if err != nil {
			return nil, err
		}
		s.top, s.memory, s.ledger = m, m, rlqs.NewMemoryLedger(nil)
		s.closers = append(s.closers, m.Close)
		return s, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errStoreURL, err)
	}
	var server backend.Store
	switch u.Scheme {
	case "redis", "rediss", "unix", "redis-cluster", "rediss-cluster", "redis-sentinel", "rediss-sentinel":
		c, err := goredisClient(u, raw)
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, c.Close)
		var opts []redis.Option
		if o.autoPipeline {
			opts = append(opts, redis.WithAutoPipeline(nil))
		}
		if server, err = redis.New(c, opts...); err != nil {
			return nil, err
		}
		script := goredis.NewScript(rlqs.LedgerScript)
		s.ledger = rlqs.NewScriptLedger(func(ctx context.Context, keys []string, args ...any) (int64, error) {
			return script.Run(ctx, c, keys, args...).Int64()
		}, ledgerPrefix)
	case "valkey", "valkeys":
		opt, err := vk.ParseURL(clusterURL(u))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errStoreURL, err)
		}
		c, err := vk.NewClient(opt)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", backend.ErrStore, err)
		}
		s.closers = append(s.closers, func() error { c.Close(); return nil })
		if server, err = valkey.New(c); err != nil {
			return nil, err
		}
		script := vk.NewLuaScript(rlqs.LedgerScript)
		s.ledger = rlqs.NewScriptLedger(func(ctx context.Context, keys []string, args ...any) (int64, error) {
			words := make([]string, len(args))
			for i, a := range args {
				words[i] = fmt.Sprint(a)
			}
			return script.Exec(ctx, c, keys, words).AsInt64()
		}, ledgerPrefix)
	default:
		return nil, fmt.Errorf("%w: scheme %q: memory, redis, redis-cluster, redis-sentinel or valkey", errStoreURL, u.Scheme)
	}
	s.top, s.server = server, server
	if !o.noGuard {
		local, err := memory.New(o.memoryOptions()...)
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, local.Close)
		g, err := guard.New(server, guard.WithName("store"), guard.WithFallback(local, o.instances),
			guard.WithStateObserver(func(name string, from, to guard.State) {
				obs.BreakerStateChanged(name, from, to)
				log.Warn("store breaker", "store", name, "from", from.String(), "to", to.String())
			}))
		if err != nil {
			return nil, err
		}
		if obs != nil {
			obs.BreakerState("store", g.State())
		}
		s.top, s.guard = g, g
	}
	// Under -count-over-limit every hit is a charge, which a near cache
	// never answers, and no denial is ever cached: the cache would only
	// hear every other instance's charges (a message each) for nothing.
	if o.nearCache > 0 && !o.countOverLimit {
		n, err := nearcache.New(s.top, nearcache.WithSize(o.nearCache))
		if err != nil {
			return nil, err
		}
		s.closers = append([]func() error{n.Close}, s.closers...)
		s.top, s.near = n, o.nearCache
	}
	return s, nil
}

// clusterURL turns the scheme into the clients' own (redis, rediss) and a
// comma-separated host list into their addr parameters.
func clusterURL(u *url.URL) string {
	c := *u
	c.Scheme = "redis"
	if u.Scheme == "rediss" || u.Scheme == "rediss-cluster" || u.Scheme == "rediss-sentinel" || u.Scheme == "valkeys" {
		c.Scheme = "rediss"
	}
	hosts := strings.Split(u.Host, ",")
	c.Host = hosts[0]
	q := c.Query()
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	c.RawQuery = q.Encode()
	return c.String()
}

// password finds the password of a URL's userinfo, parsed or not.
var password = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://[^/@]*?:([^/@]*)@`)

// redact is a store URL without its password, for logs: also a URL that
// does not parse (its password once went to the log in url.Parse's error).
func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		q := u.Query()
		if !q.Has("password") && u.User == nil {
			return raw
		}
		if q.Has("password") { // a sentinel URL's master password
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.Redacted()
	}
	if m := password.FindStringSubmatchIndex(raw); m != nil && m[3] > m[2] {
		return raw[:m[2]] + "xxxxx" + raw[m[3]:]
	}
	return raw
}

// scrub is err with the password of raw, a store URL, replaced in its
// message wherever it appears; errors.Is still sees what err wraps.
func scrub(err error, raw string) error {
	m := password.FindStringSubmatch(raw)
	if m == nil || m[1] == "" || !strings.Contains(err.Error(), m[1]) {
		return err
	}
	return scrubbed{err, strings.ReplaceAll(err.Error(), m[1], "xxxxx")}
}

type scrubbed struct {
	err error
	msg string
}

func (s scrubbed) Error() string { return s.msg }
func (s scrubbed) Unwrap() error { return s.err }

// goredisClient is the go-redis client of a redis, redis-cluster or
// redis-sentinel URL. Every one honours the caller's context (go-redis's
// ContextTimeoutEnabled, which its URLs cannot set): a call then ends at
// the decision's deadline by itself, where without it the store runs each
// call in a goroutine of its own to bound it (rediscore.Bounded), which
// cost ratelimitd a goroutine and its stack's growth per decision.
func goredisClient(u *url.URL, raw string) (goredis.UniversalClient, error) {
	switch u.Scheme {
	case "redis-cluster", "rediss-cluster":
		opt, err := goredis.ParseClusterURL(clusterURL(u))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errStoreURL, err)
		}
		opt.ContextTimeoutEnabled = true
		return goredis.NewClusterClient(opt), nil
	case "redis-sentinel", "rediss-sentinel":
		opt, err := goredis.ParseFailoverURL(clusterURL(u))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errStoreURL, err)
		}
		if opt.MasterName == "" {
			return nil, fmt.Errorf("%w: a sentinel URL names its master (?master_name=)", errStoreURL)
		}
		opt.ContextTimeoutEnabled = true
		return goredis.NewFailoverClient(opt), nil
	}
	opt, err := goredis.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errStoreURL, err)
	}
	opt.ContextTimeoutEnabled = true
	return goredis.NewClient(opt), nil
}
