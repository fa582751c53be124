package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// testCA signs certificates for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a certificate and key (PEM) for serial, naming the
// loopback address and the DNS name dns, for a server and a client.
func (ca *testCA) issue(t *testing.T, serial int64, dns string) (certPEM, keyPEM []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: dns},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{dns}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// The gRPC listener over mTLS, from envoyproxy/ratelimit's variables: a
// client with a certificate from the CA and the SAN asked for is served,
// one without is refused, and a certificate renewed on disk serves the
// next connections without a restart.
func TestGRPCOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o600))
		return p
	}
	serverCert, serverKey := ca.issue(t, 10, "ratelimit.local")
	certFile, keyFile := write("server.pem", serverCert), write("server.key", serverKey)
	caFile := write("ca.pem", ca.pem)
	clientCert, clientKey := ca.issue(t, 20, "envoy.local")
	pair, err := tls.X509KeyPair(clientCert, clientKey)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.pem)
	var mu sync.Mutex
	var seen []*big.Int // the serials of the server certificates seen
	mutual := credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, ServerName: "ratelimit.local",
		VerifyPeerCertificate: func(_ [][]byte, chains [][]*x509.Certificate) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, chains[0][0].SerialNumber)
			return nil
		}})
	d := startWith(t, []string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + certFile, "GRPC_SERVER_TLS_KEY=" + keyFile,
		"GRPC_CLIENT_TLS_CACERT=" + caFile, "GRPC_CLIENT_TLS_SAN=envoy.local"}, mutual,
		"-config", "../../examples/ratelimitd.yaml", "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0", "-log-format", "json")
	check := func(conn *grpc.ClientConn) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	require.NoError(t, check(d.conn), "a client with a certificate from the CA")
	_, err = d.ask(context.Background(), "api", []string{"user", "tls"})
	require.NoError(t, err)

	anonymous, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "ratelimit.local"})))
	require.NoError(t, err)
	defer anonymous.Close()
	assert.Error(t, check(anonymous), "a client without a certificate is refused")

	otherCert, otherKey := ca.issue(t, 21, "someone.else")
	other, err := tls.X509KeyPair(otherCert, otherKey)
	require.NoError(t, err)
	wrongSAN, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "ratelimit.local", Certificates: []tls.Certificate{other}})))
	require.NoError(t, err)
	defer wrongSAN.Close()
	assert.Error(t, check(wrongSAN), "a certificate without the SAN is refused")

	renewed, renewedKey := ca.issue(t, 11, "ratelimit.local")
	write("server.pem", renewed)
	write("server.key", renewedKey)
	later := time.Now().Add(2 * time.Second) // a modification time the reload sees as new
	require.NoError(t, os.Chtimes(certFile, later, later))
	require.NoError(t, os.Chtimes(keyFile, later, later))
	time.Sleep(checkEvery + 100*time.Millisecond)
	fresh, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(mutual))
	require.NoError(t, err)
	defer fresh.Close()
	require.NoError(t, check(fresh))
	lastSeen := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		require.NotEmpty(t, seen)
		return seen[len(seen)-1].Int64()
	}
	assert.Equal(t, int64(11), lastSeen(), "the renewed certificate serves new connections")

	// A renewal that keeps the files' modification times (a copy that
	// preserves them, a clock that stepped back) is seen by its content:
	// the modification times alone once missed it.
	again, againKey := ca.issue(t, 12, "ratelimit.local")
	write("server.pem", again)
	write("server.key", againKey)
	require.NoError(t, os.Chtimes(certFile, later, later))
	require.NoError(t, os.Chtimes(keyFile, later, later))
	time.Sleep(checkEvery + 100*time.Millisecond)
	third, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(mutual))
	require.NoError(t, err)
	defer third.Close()
	require.NoError(t, check(third))
	assert.Equal(t, int64(12), lastSeen(), "a renewal with the same modification times serves new connections")
}
