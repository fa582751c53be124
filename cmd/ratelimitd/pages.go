package main

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/service"
)

// The HTTP pages: the public API's routes, the admin listener's, the probes,
// and -check's output.

// adminServer serves liveness, readiness, metrics and /rlconfig (the rules
// in force, as envoyproxy/ratelimit's debug port lists them) on a listener
// of their own: with -http's connections all held by slow clients,
// /healthz there answered 0 of 18 probes within 1 s, and a prober would
// have restarted a healthy pod.
func adminServer(reg *prometheus.Registry, ready *readiness, svc *service.Service) *http.Server {
	mux := http.NewServeMux()
	probes(mux, ready)
	mux.HandleFunc("/rlconfig", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_ = svc.Config().Dump(w)
	})
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return &http.Server{Handler: mux, ReadHeaderTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute}
}

// check loads the configuration at o.check and writes its rules (-check).
func check(o options, w io.Writer) error {
	cfg, err := config.Load(o.check, o.loadOptions()...)
	if err != nil {
		return err
	}
	if err := cfg.Dump(w); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "ok: %s: %d files, %d domains, %d rules\n", o.check, len(cfg.Files), len(cfg.Domains()), len(cfg.Rules()))
	return err
}

// routes is the HTTP API: /v1/allow, liveness, readiness and metrics.
func routes(svc *service.Service, rls *service.RLS, reg *prometheus.Registry, ready *readiness) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/allow", svc.Allow)
	probes(mux, ready)
	mux.HandleFunc("/json", rls.JSON)
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

// probes adds liveness and readiness to mux: ratelimitd's /healthz and
// /readyz, and envoyproxy/ratelimit's probe, /healthcheck.
func probes(mux *http.ServeMux, ready *readiness) {
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := ready.ready(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("/healthcheck", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := ready.ready(); !ok {
			http.Error(w, why, http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "OK")
	})
}
