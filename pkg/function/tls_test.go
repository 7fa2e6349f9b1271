package function_test

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
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// writeCert writes a self-signed certificate for 127.0.0.1 with the given serial and returns its
// pool.
func writeCert(t *testing.T, certFile, keyFile string, serial int64, modTime time.Time) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "function"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(certFile, modTime, modTime); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

// With a mounted certificate a function serves HTTPS only, and serves a renewed certificate
// without a restart.
func TestServesTLSWithAMountedCertificate(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	pool := writeCert(t, certFile, keyFile, 1, time.Now().Add(-time.Minute))
	fn := function.New("tls", "test")
	if err := fn.Parse([]string{"--tls-cert-file", certFile, "--tls-key-file", keyFile}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- fn.ServeListener(ctx, ln, fn.Handler(func(context.Context, event.Event) function.Response { return function.Response{} }, nil))
	}()
	defer func() { cancel(); <-done }()
	url := "https://" + ln.Addr().String()
	get := func(pool *x509.CertPool) (*http.Response, error) {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		return c.Get(url + "/healthz")
	}
	resp, err := get(pool)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS.PeerCertificates[0].SerialNumber.Int64() != 1 {
		t.Fatalf("HTTPS /healthz: %d", resp.StatusCode)
	}
	if resp, err := http.Get("http://" + ln.Addr().String() + "/healthz"); err == nil && resp.StatusCode == http.StatusOK {
		t.Fatal("plain HTTP is still served")
	}
	renewed := writeCert(t, certFile, keyFile, 2, time.Now())
	resp, err = get(renewed)
	if err != nil {
		t.Fatalf("after renewal: %v", err)
	}
	_ = resp.Body.Close()
	if serial := resp.TLS.PeerCertificates[0].SerialNumber.Int64(); serial != 2 {
		t.Fatalf("after renewal the function serves certificate %d", serial)
	}
}

// A sender trusts the CA a SinkBinding injects as K_CA_CERTS, and without it refuses the sink's
// certificate.
func TestSenderTrustsKCACerts(t *testing.T) {
	sink := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) }))
	defer sink.Close()
	untrusting, err := function.NewSender(sink.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := untrusting.Send(ctx, functest.Ping(`{}`)); err == nil {
		t.Fatal("a sink with an unknown CA was trusted")
	}
	t.Setenv("K_CA_CERTS", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: sink.Certificate().Raw})))
	trusting, err := function.NewSender(sink.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := trusting.Send(context.Background(), functest.Ping(`{}`)); err != nil {
		t.Fatalf("with K_CA_CERTS: %v", err)
	}
}
