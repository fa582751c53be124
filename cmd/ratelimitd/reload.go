package main

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/service"
)

// watcher reloads the configuration at path when its content changes and
// then holds still for settle: a file written in several steps within
// settle (an editor, a copy, a deploy tool) is never applied half-written,
// even when the half parses. A writer pausing longer mid-file cannot be
// told from a finished one; the docs ask for atomic writes (a rename, a
// symlink swap). A configuration that does not load is logged (file, line,
// problem) and the one in force keeps serving; a request decides entirely
// under the configuration it started with.
//
// It polls the content rather than use inotify (fsnotify): a Kubernetes
// ConfigMap changes by swapping a symlink that a watch on the file misses,
// editors replace files by renaming, and reading a few kilobytes a second
// costs nothing measurable beside the decisions.
type watcher struct {
	path             string
	interval, settle time.Duration
	svc              *service.Service
	log              *slog.Logger
	reloads          *prometheus.CounterVec // by result: applied, rejected
	lastReload       prometheus.Gauge       // Unix time of the last configuration applied
	// applied is the fingerprint of the configuration in force (or last
	// rejected), taken when the watcher is made.
	applied [sha256.Size]byte
}

func newWatcher(reg prometheus.Registerer, path string, interval, settle time.Duration, svc *service.Service, log *slog.Logger) *watcher {
	w := &watcher{path: path, interval: interval, settle: settle, svc: svc, log: log, applied: fingerprint(path),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimitd_config_reloads_total",
			Help: "Configurations read after a change: applied, or rejected (the previous one kept serving).",
		}, []string{"result"}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimitd_config_last_reload_timestamp_seconds",
			Help: "When the configuration in force was applied (Unix time): at start, then at each reload.",
		}),
	}
	w.reloads.WithLabelValues("applied")
	w.reloads.WithLabelValues("rejected")
	w.lastReload.SetToCurrentTime()
	reg.MustRegister(w.reloads, w.lastReload)
	return w
}

// run polls every interval until ctx ends.
func (w *watcher) run(ctx context.Context) {
	applied := w.applied
	pending, since := applied, time.Time{}
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := fingerprint(w.path)
		switch {
		case now == applied:
			pending = applied
			continue
		case now != pending: // changed since the last poll: wait for it to settle
			pending, since = now, time.Now()
			continue
		case time.Since(since) < w.settle:
			continue
		}
		applied = now
		w.load()
	}
}

// load reads the configuration and applies it, or keeps the one in force.
func (w *watcher) load() {
	cfg, err := config.Load(w.path)
	if err == nil {
		err = w.svc.SetConfig(cfg)
	}
	if err != nil {
		w.reloads.WithLabelValues("rejected").Inc()
		w.log.Error("configuration rejected: the previous one keeps serving", "config", w.path, "error", err)
		return
	}
	w.reloads.WithLabelValues("applied").Inc()
	w.lastReload.SetToCurrentTime()
	w.log.Info("configuration reloaded", "config", w.path, "domains", cfg.Domains())
}

// fingerprint is a hash of the configuration's files (names and content):
// what changes when the configuration may have.
func fingerprint(path string) [sha256.Size]byte {
	h := sha256.New()
	files := []string{path}
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		files, _ = filepath.Glob(filepath.Join(path, "*.y*ml"))
		sort.Strings(files)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		h.Write([]byte(f))
		h.Write([]byte{0})
		if err != nil {
			h.Write([]byte(err.Error()))
		}
		h.Write(data)
		h.Write([]byte{0})
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
