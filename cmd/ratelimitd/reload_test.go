package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/service"
)

const (
	withoutUser = "domain: api\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 100}\n"
	withUser    = withoutUser + "  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"
)

// watching runs a watcher of path (polled every 10ms, settling for settle)
// over a service under the configuration there, until the test ends.
func watching(t *testing.T, path string, settle time.Duration) (*watcher, *service.Service) {
	cfg, err := config.Load(path)
	require.NoError(t, err)
	m, err := memory.New()
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	svc, err := service.New(m, cfg, service.Options{})
	require.NoError(t, err)
	w := newWatcher(prometheus.NewRegistry(), path, nil, 10*time.Millisecond, settle, svc, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go w.run(ctx)
	return w, svc
}

// until waits for cond, for at most a minute.
func until(t *testing.T, cond func() bool) {
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "not within a minute")
	}
}

// A file rewritten in two writes is applied once, whole: its first half,
// valid YAML without the user rule, was once applied, and user=mallory,
// limited to 5 an hour, got 10 of 10 admitted meanwhile.
func TestAConfigWrittenWithinTheSettleTimeIsAppliedWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(withoutUser+"# v1\n"), 0o644))
	const settle = 2 * time.Second
	w, svc := watching(t, path, settle)

	first := time.Now()
	require.NoError(t, os.WriteFile(path, []byte(withoutUser), 0o644)) // the first half
	time.Sleep(50 * time.Millisecond)                                  // polled meanwhile
	require.NoError(t, os.WriteFile(path, []byte(withUser), 0o644))
	gap := time.Since(first)
	until(t, func() bool { return testutil.ToFloat64(w.reloads.WithLabelValues("applied")) > 0 })
	if gap < settle { // else the machine held the test longer than the settle time: the half settled
		require.Equal(t, 1.0, testutil.ToFloat64(w.reloads.WithLabelValues("applied")), "one configuration applied")
		rule, _ := svc.Config().Match("api", []config.Entry{{Key: "user", Value: "mallory"}})
		require.NotNil(t, rule, "the whole file, with the user rule")
	}
}

// A directory emptied while it configures domains is rejected: every domain
// would have been unlimited (envoyproxy/ratelimit applies it; a directory
// empty at start loads, as there).
func TestAnEmptiedConfigDirectoryIsRejected(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(file, []byte(withUser), 0o644))
	w, svc := watching(t, dir, 0)
	require.NoError(t, os.Remove(file))
	until(t, func() bool { return testutil.ToFloat64(w.reloads.WithLabelValues("rejected")) > 0 })
	require.Zero(t, testutil.ToFloat64(w.reloads.WithLabelValues("applied")))
	require.True(t, svc.Config().HasDomain("api"), "the previous configuration keeps serving")
	c, err := config.Load(dir)
	require.NoError(t, err)
	require.Empty(t, c.Domains())
}

// A symlink swap (a Kubernetes ConfigMap's, envoyproxy/ratelimit's
// "current") is applied without waiting for the settle time.
func TestASymlinkSwapIsAppliedAtOnce(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, v, "config"), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "v1", "config", "rules.yaml"), []byte(withoutUser), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "v2", "config", "rules.yaml"), []byte(withUser), 0o644))
	require.NoError(t, os.Symlink("v1", filepath.Join(root, "current")))
	const settle = time.Hour // never reached: only a swap applies
	w, svc := watching(t, filepath.Join(root, "current", "config"), settle)
	require.NoError(t, os.Symlink("v2", filepath.Join(root, "next")))
	require.NoError(t, os.Rename(filepath.Join(root, "next"), filepath.Join(root, "current")))
	until(t, func() bool { return testutil.ToFloat64(w.reloads.WithLabelValues("applied")) > 0 })
	rule, _ := svc.Config().Match("api", []config.Entry{{Key: "user", Value: "u"}})
	require.NotNil(t, rule, "v2's rules")
}
