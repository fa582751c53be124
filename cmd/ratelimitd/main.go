// Command ratelimitd is the ratelimit library as a service: Envoy's rate
// limit service (gRPC, envoy.service.ratelimit.v3) and a JSON API over HTTP,
// configured by a YAML file in envoyproxy/ratelimit's format, extended with
// the library's algorithms (sliding log, fixed window, sliding-window
// counter, GCRA) and windows of any length. See docs/service.md.
//
//	ratelimitd -config examples/ratelimitd.yaml                      # memory store
//	ratelimitd -config /etc/ratelimit -store redis://redis:6379      # shared by every instance
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/rlqs"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/rlswire"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/service"
	"github.com/ratelimit-go/ratelimit/promlimit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	tuneGC(os.Getenv)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	switch {
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "ratelimitd:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "ratelimitd:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then drains: readiness and gRPC health turn to
// not serving, listeners close, requests in flight get up to -drain to
// finish, and the store closes.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	o, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	if o.check != "" {
		return check(o, os.Stdout)
	}
	log := newLogger(o, stderr)
	routeClientLogs(log)
	for _, note := range o.envNotes {
		log.Warn("envoyproxy/ratelimit's environment: " + note)
	}
	cfg, err := config.Load(o.config, o.loadOptions()...)
	if errors.Is(err, fs.ErrNotExist) && o.startWithoutConfig {
		log.Warn("no configuration yet: serving with no domain until it appears", "config", o.config)
		cfg, err = config.Empty(), nil
	}
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	obs, err := promlimit.New(reg)
	if err != nil {
		return err
	}
	st, err := openStore(o.store, o, obs, log)
	if err != nil {
		return err
	}
	defer st.Close()
	warmCtx, cancelWarm := context.WithTimeout(ctx, warmBound)
	if err := warm(warmCtx, st.server); err != nil {
		log.Warn("the store did not answer the warm-up: serving all the same", "error", err)
	}
	cancelWarm()
	if st.memory != nil {
		if err := promlimit.RegisterMemoryStore(reg, "memory", st.memory); err != nil {
			return err
		}
	}
	detailed := newDetailedMetrics(reg, o.detailedValues)
	upstream := newUpstreamMetrics(reg, o.nearLimitRatio)
	unknown := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ratelimitd_unknown_domain_requests_total",
		Help: "Requests for a domain the configuration lacks, answered OK (-unknown-domain ok).",
	})
	reg.MustRegister(unknown)
	svc, err := service.New(st.top, cfg, service.Options{
		Limiter:        []ratelimit.Option{ratelimit.WithObserver(obs), ratelimit.WithTimeout(o.timeout)},
		Shadow:         []ratelimit.Option{ratelimit.WithObserver(dryRun{obs})},
		Limits:         service.Limits{Descriptors: o.maxDescriptors, Entries: o.maxEntries},
		Detailed:       detailed.observe,
		Decided:        upstream.observe,
		StrictDomains:  o.strictDomains,
		UnknownDomain:  func(string) { unknown.Inc() },
		CountOverLimit: o.countOverLimit,
		QuotaMode:      o.quotaMode,
		ShadowMode:     o.shadowMode,
	})
	if err != nil {
		return err
	}
	lis, err := listen(o)
	if err != nil {
		return err
	}
	grpcLis, httpLis, adminLis := lis[0], lis[1], lis[2]
	closeAll := func() {
		for _, l := range lis {
			if l != nil {
				l.Close()
			}
		}
	}
	creds, err := o.grpcTLS.serverOption(log)
	if err != nil {
		closeAll()
		return err
	}
	gopts := grpcOptions(o, log)
	if creds != nil {
		gopts = append(gopts, creds)
	}
	gs := grpc.NewServer(gopts...)
	rls := service.NewRLS(svc, o.rlsOptions()...)
	rlsv3.RegisterRateLimitServiceServer(gs, rls)
	if o.rlqsTTL > 0 {
		rlqsv3.RegisterRateLimitQuotaServiceServer(gs, rlqs.NewServer(svc.Config, st.ledger, o.rlqsTTL))
	}
	ready := newReadiness(svc, o.healthyNeedsDomain)
	healthpb.RegisterHealthServer(gs, ready.grpc)
	// Every HTTP connection ends: one that sends nothing, or too slowly,
	// is closed after -http-timeout, an idle one after -http-idle-timeout,
	// and at most -http-max-conns are open, so a client holding
	// connections cannot take the file descriptors Envoy's gRPC
	// connections need.
	hsrv := &http.Server{Handler: routes(svc, rls, reg, ready), ReadHeaderTimeout: o.httpTimeout,
		ReadTimeout: o.httpTimeout, WriteTimeout: o.httpTimeout, IdleTimeout: o.httpIdle}
	if o.httpConns > 0 {
		httpLis = netutil.LimitListener(httpLis, o.httpConns)
	}

	errs := make(chan error, 3)
	go func() { errs <- gs.Serve(grpcLis) }()
	go func() { errs <- hsrv.Serve(httpLis) }()
	var asrv *http.Server
	adminAddr := ""
	if adminLis != nil {
		asrv = adminServer(reg, ready, svc)
		adminAddr = adminLis.Addr().String()
		go func() { errs <- asrv.Serve(netutil.LimitListener(adminLis, adminConns)) }()
	}
	w := newWatcher(reg, o.config, o.loadOptions(), o.reload, o.settle, svc, log)
	w.onApply = ready.update
	if o.reload > 0 {
		go w.run(ctx)
	}
	log.Info("serving", "grpc", grpcLis.Addr().String(), "grpc_tls", creds != nil, "http", httpLis.Addr().String(), "admin", adminAddr,
		"store", redact(o.store), "guard", st.guard != nil, "near_cache", st.near,
		"config", o.config, "domains", cfg.Domains())

	var served error
	select {
	case <-ctx.Done():
	case served = <-errs:
	}
	ready.drain() // /readyz 503, gRPC health NOT_SERVING
	if served == nil && o.shutdownDelay > 0 {
		// Still serving, so that the requests a load balancer sends until it
		// sees readiness fail are answered, not refused.
		log.Info("not ready: serving until the shutdown delay ends", "delay", o.shutdownDelay.String())
		time.Sleep(o.shutdownDelay)
	}
	log.Info("draining", "bound", o.drain.String())
	drained := make(chan struct{})
	go func() { gs.GracefulStop(); close(drained) }()
	sctx, cancel := context.WithTimeout(context.Background(), o.drain)
	defer cancel()
	herr := hsrv.Shutdown(sctx)
	if asrv != nil {
		_ = asrv.Shutdown(sctx)
	}
	select {
	case <-drained:
	case <-sctx.Done():
		gs.Stop()
	}
	log.Info("stopped")
	if served != nil && !errors.Is(served, http.ErrServerClosed) {
		return served
	}
	if errors.Is(herr, context.DeadlineExceeded) {
		log.Warn("requests still in flight after the drain bound were cut", "bound", o.drain.String())
	}
	return nil
}

// maxMessage bounds a gRPC request's message: 64 descriptors of 16
// entries of keys and values of 1 KiB fit.
const maxMessage = 1 << 20

// listen opens the gRPC, HTTP and admin listeners (the admin one nil
// without -admin), or none of them.
func listen(o options) ([3]net.Listener, error) {
	var lis [3]net.Listener
	for i, l := range []struct{ flag, addr string }{{"-grpc", o.grpcAddr}, {"-http", o.httpAddr}, {"-admin", o.admin}} {
		if l.addr == "" && l.flag == "-admin" {
			continue
		}
		var err error
		if lis[i], err = net.Listen("tcp", l.addr); err != nil {
			for _, open := range lis[:i] {
				if open != nil {
					open.Close()
				}
			}
			return lis, fmt.Errorf("%s: %w", l.flag, err)
		}
	}
	if o.grpcConns > 0 {
		lis[0] = netutil.LimitListener(lis[0], o.grpcConns)
	}
	return lis, nil
}

// grpcOptions are the gRPC server's options but its credentials. What one
// connection may hold is bounded: its streams (-grpc-max-streams; one
// connection of 200,000 streams that never sent a message once took the
// service to 1.29 GB and 172k goroutines), its handshake, its idle time and
// age, and how often it may ping (a client pinging more often than every
// 10 s is sent away). A request's message is bounded as /v1/allow's body
// is: the caps on descriptors and entries leave room to spare, and a
// larger message is refused (ResourceExhausted) before it is decoded.
func grpcOptions(o options, log *slog.Logger) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(rlswire.Codec{}), // proto's messages, without its reflection for Envoy's
		grpc.UnaryInterceptor(recovered(log)),
		grpc.StreamInterceptor(recoveredStream(log)),
		grpc.NumStreamWorkers(grpcWorkers),
		grpc.MaxRecvMsgSize(maxMessage),
		grpc.MaxConcurrentStreams(uint32(o.grpcStreams)),
		grpc.ConnectionTimeout(handshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: o.grpcIdle,
			MaxConnectionAge: o.grpcAge, MaxConnectionAgeGrace: o.grpcGrace}),
	}
}

// grpcWorkers is how many goroutines serve gRPC streams and stay for the
// next (more are started while all are busy): a goroutine per stream, the
// default, starts with a small stack and grows it on every request, which
// took 23% of the service's CPU under the bench's load (3% with workers).
// 64 is the concurrency Envoy's clusters usually keep in flight.
const grpcWorkers = 64

// handshakeTimeout bounds a new gRPC connection's handshake (TLS and
// HTTP/2's preface).
const handshakeTimeout = 10 * time.Second

// adminConns bounds the admin listener's connections: probes and scrapes
// are few, and none of the public API's clients can reach it.
const adminConns = 64

// recovered turns a panic in a handler into an Internal error and a log
// line, as net/http does for its handlers: one bad request must not take
// every other caller's answers down with the process.
func recovered(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("panic in a handler", "method", info.FullMethod, "panic", fmt.Sprint(r))
				resp, err = nil, status.Error(codes.Internal, "internal error")
			}
		}()
		return handler(ctx, req)
	}
}

// recoveredStream is recovered for a stream's handler (the Rate Limit
// Quota Service's, health's Watch): the stream ends Internal.
func recoveredStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("panic in a handler", "method", info.FullMethod, "panic", fmt.Sprint(r))
				err = status.Error(codes.Internal, "internal error")
			}
		}()
		return handler(srv, ss)
	}
}
