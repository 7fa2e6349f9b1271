package function

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// tlsFlags serve HTTPS with a mounted certificate (a cert-manager Secret), for Knative's
// transport-encryption.
type tlsFlags struct {
	cert, key *string
}

func (f *Function) registerTLSFlags() *tlsFlags {
	return &tlsFlags{
		cert: f.Flags.String("tls-cert-file", "", "serve HTTPS with this PEM certificate (chain); re-read when the file changes (empty: plain HTTP)"),
		key:  f.Flags.String("tls-key-file", "", "the PEM private key of --tls-cert-file"),
	}
}

// listener wraps ln in TLS when a certificate is configured.
func (t *tlsFlags) listener(ln net.Listener) (net.Listener, error) {
	if t == nil || (*t.cert == "" && *t.key == "") {
		return ln, nil
	}
	if *t.cert == "" || *t.key == "" {
		return nil, errors.New("--tls-cert-file and --tls-key-file go together")
	}
	c := &certFiles{cert: *t.cert, key: *t.key}
	if _, err := c.get(nil); err != nil {
		return nil, err
	}
	return tls.NewListener(ln, &tls.Config{GetCertificate: c.get, MinVersion: tls.VersionTLS12}), nil
}

// certFiles loads a key pair, again whenever the certificate file's modification time changes, so
// a renewed certificate is served without a restart.
type certFiles struct {
	cert, key string
	mu        sync.Mutex
	mtime     time.Time
	loaded    *tls.Certificate
}

func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	st, err := os.Stat(c.cert)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loaded != nil && st.ModTime().Equal(c.mtime) {
		return c.loaded, nil
	}
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		if c.loaded != nil {
			return c.loaded, nil // mid-rotation: the key file may not be written yet
		}
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	c.loaded, c.mtime = &pair, st.ModTime()
	return c.loaded, nil
}

// sinkCATransport trusts, besides the system roots, the PEM bundle a SinkBinding injects as
// K_CA_CERTS (the sink's CA when Knative's transport encryption is on).
func sinkCATransport(caPEM string) (*http.Transport, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if caPEM == "" {
		return t, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM([]byte(caPEM)) {
		return nil, errors.New("K_CA_CERTS holds no PEM certificate")
	}
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return t, nil
}
