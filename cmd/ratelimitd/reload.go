package main

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/service"
)

// watch reloads the configuration at path when its content changes, every
// interval until ctx ends. A file that does not load is logged (file, line,
// problem) and the configuration in force keeps serving; a request decides
// entirely under the configuration it started with.
//
// It polls the content rather than use inotify (fsnotify): a Kubernetes
// ConfigMap changes by swapping a symlink that a watch on the file misses,
// editors replace files by renaming, and reading a few kilobytes a second
// costs nothing measurable beside the decisions.
func watch(ctx context.Context, path string, interval time.Duration, svc *service.Service, log *slog.Logger) {
	last := fingerprint(path)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := fingerprint(path)
		if now == last {
			continue
		}
		last = now
		cfg, err := config.Load(path)
		if err == nil {
			err = svc.SetConfig(cfg)
		}
		if err != nil {
			log.Error("configuration rejected: the previous one keeps serving", "config", path, "error", err)
			continue
		}
		log.Info("configuration reloaded", "config", path, "domains", cfg.Domains())
	}
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
