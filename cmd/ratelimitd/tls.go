package main

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// grpcTLS is the gRPC listener's TLS (envoyproxy/ratelimit's
// GRPC_SERVER_USE_TLS and its files): a certificate and key, and for mTLS
// the CA a client's certificate must chain to and a SAN it must hold.
type grpcTLS struct {
	cert, key, clientCA, clientSAN string
}

// checkEvery is how often the files are looked at for a change.
const checkEvery = time.Second

// serverOption is the gRPC server's credentials, nil without a
// certificate. The files are read now (an error refuses to start) and
// again when they change: a certificate renewed on disk (cert-manager, a
// mounted secret) serves new connections without a restart; one that does
// not load is logged and the previous one keeps serving.
func (g grpcTLS) serverOption(log *slog.Logger) (grpc.ServerOption, error) {
	if g.cert == "" {
		return nil, nil
	}
	f := &tlsFiles{g: g, log: log}
	if err := f.load(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: f.config}
	return grpc.Creds(credentials.NewTLS(cfg)), nil
}

// tlsFiles holds what the files said last, and a fingerprint of their
// bytes: a change is seen by its content, whatever the files' modification
// times say (a copy that keeps them, a clock that stepped back).
type tlsFiles struct {
	g   grpcTLS
	log *slog.Logger

	mu      sync.Mutex
	checked time.Time
	stamp   [sha256.Size]byte
	current *tls.Config
}

// config returns the configuration for a new connection, re-read first if
// a file changed since the last look (at most every checkEvery).
func (f *tlsFiles) config(*tls.ClientHelloInfo) (*tls.Config, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Since(f.checked) >= checkEvery {
		f.checked = time.Now()
		if f.stampNow() != f.stamp {
			if err := f.loadLocked(); err != nil {
				f.log.Error("gRPC TLS files rejected: the previous certificate keeps serving", "error", err)
			} else {
				f.log.Info("gRPC TLS files reloaded", "cert", f.g.cert)
			}
		}
	}
	return f.current, nil
}

func (f *tlsFiles) load() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checked = time.Now()
	return f.loadLocked()
}

// loadLocked reads the files into a new configuration; on an error the
// current one stays.
func (f *tlsFiles) loadLocked() error {
	stamp := f.stampNow()
	pair, err := tls.LoadX509KeyPair(f.g.cert, f.g.key)
	if err != nil {
		return fmt.Errorf("-grpc-tls-cert/-grpc-tls-key: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	if f.g.clientCA != "" {
		pem, err := os.ReadFile(f.g.clientCA)
		if err != nil {
			return fmt.Errorf("-grpc-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("-grpc-client-ca: no certificate in %s", f.g.clientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
		if san := f.g.clientSAN; san != "" {
			cfg.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
				if len(chains) > 0 && holdsSAN(chains[0][0], san) {
					return nil
				}
				return errors.New("the client's certificate does not hold " + san)
			}
		}
	}
	f.current, f.stamp = cfg, stamp
	return nil
}

// stampNow is a fingerprint of the files' bytes (a missing file reads as
// none): a few kilobytes, read at most every checkEvery.
func (f *tlsFiles) stampNow() [sha256.Size]byte {
	h := sha256.New()
	for _, p := range []string{f.g.cert, f.g.key, f.g.clientCA} {
		b, _ := os.ReadFile(p)
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// holdsSAN reports whether cert names san among its DNS names or URIs.
func holdsSAN(cert *x509.Certificate, san string) bool {
	if slices.Contains(cert.DNSNames, san) {
		return true
	}
	for _, u := range cert.URIs {
		if u.String() == san {
			return true
		}
	}
	return false
}
