package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
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
	opts             []config.LoadOption
	interval, settle time.Duration
	svc              *service.Service
	log              *slog.Logger
	reloads          *prometheus.CounterVec // by result: applied, rejected
	lastReload       prometheus.Gauge       // Unix time of the last configuration applied
	// applied is the fingerprint of the configuration in force (or last
	// rejected), taken when the watcher is made.
	applied [sha256.Size]byte
	// target is where the path's symbolic links lead, when it was made.
	target string
	// onApply, when set, is called after each configuration applied.
	onApply func()
}

func newWatcher(reg prometheus.Registerer, path string, opts []config.LoadOption, interval, settle time.Duration, svc *service.Service, log *slog.Logger) *watcher {
	w := &watcher{path: path, opts: opts, interval: interval, settle: settle, svc: svc, log: log, applied: fingerprint(path, opts),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimitd_config_reloads_total",
			Help: "Configurations read after a change: applied, or rejected (the previous one kept serving).",
		}, []string{"result"}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimitd_config_last_reload_timestamp_seconds",
			Help: "When the configuration in force was applied (Unix time): at start, then at each reload.",
		}),
	}
	w.target, _ = filepath.EvalSymlinks(path)
	w.reloads.WithLabelValues("applied")
	w.reloads.WithLabelValues("rejected")
	w.lastReload.SetToCurrentTime()
	reg.MustRegister(w.reloads, w.lastReload)
	return w
}

// run polls every interval until ctx ends. A change that comes with a new
// target of the path's symbolic links (a symlink swap, atomic by nature:
// Kubernetes' ConfigMaps, envoyproxy/ratelimit's runtime "current") is
// applied at once; any other waits to settle.
func (w *watcher) run(ctx context.Context) {
	applied := w.applied
	pending, since := applied, time.Time{}
	target := w.target
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := fingerprint(w.path, w.opts)
		swapped := false
		if to, err := filepath.EvalSymlinks(w.path); err == nil && to != target {
			target, swapped = to, true
		}
		switch {
		case now == applied:
			pending = applied
			continue
		case swapped:
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
	cfg, err := config.Load(w.path, w.opts...)
	if err == nil && len(cfg.Domains()) == 0 && len(w.svc.Config().Domains()) > 0 {
		// envoyproxy/ratelimit applies it, and stops limiting: a deploy
		// that empties the directory on its way is far likelier.
		err = errors.New("the configuration was emptied: it would leave every domain unlimited")
	}
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
	if w.onApply != nil {
		w.onApply()
	}
	w.log.Info("configuration reloaded", "config", w.path, "domains", cfg.Domains())
}

// fingerprint is a hash of the configuration's files (names and content),
// the files Load reads: what changes when the configuration may have.
func fingerprint(path string, opts []config.LoadOption) [sha256.Size]byte {
	h := sha256.New()
	files, err := config.Files(path, opts...)
	if err != nil {
		h.Write([]byte(err.Error()))
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
