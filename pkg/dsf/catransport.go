package dsf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"
)

// newTransport is the transport to scorers and Prometheus: the system's roots, and when caFile is
// set also the PEM bundle in it. The bundle may appear, or change, while the agent runs: OpenShift's
// service CA operator fills the agent's service-ca ConfigMap after the pod may have started, and
// rotates it. Each request looks at the file (a stat); when it changed, the transport is made
// again with the new bundle. A missing or empty file means the system's roots only: the same
// manifests run on clusters without a service CA.
func newTransport(caFile string, log *slog.Logger) (http.RoundTripper, error) {
	base := http.DefaultTransport.(*http.Transport).Clone()
	if caFile == "" {
		return base, nil
	}
	t := &caTransport{file: caFile, base: base, log: log}
	if _, err := t.current(); err != nil {
		return nil, err
	}
	return t, nil
}

type caTransport struct {
	file string
	base *http.Transport
	log  *slog.Logger

	mu      sync.Mutex
	mod     time.Time
	size    int64
	present bool
	tr      *http.Transport
}

func (t *caTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	tr, err := t.current()
	if err != nil {
		return nil, err
	}
	return tr.RoundTrip(req)
}

// current returns the transport for the file as it is now.
func (t *caTransport) current() (*http.Transport, error) {
	fi, err := os.Stat(t.file)
	present := err == nil && fi.Size() > 0
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tr != nil && present == t.present && (!present || (fi.ModTime().Equal(t.mod) && fi.Size() == t.size)) {
		return t.tr, nil
	}
	tr := t.base.Clone()
	if present {
		pem, err := os.ReadFile(t.file)
		if err != nil {
			return nil, fmt.Errorf("--ca-file %s: %w", t.file, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s holds no PEM certificate", t.file)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		t.mod, t.size = fi.ModTime(), fi.Size()
	}
	if t.tr != nil {
		t.tr.CloseIdleConnections()
	}
	t.log.Info("trusted CAs", "caFile", t.file, "present", present)
	t.tr, t.present = tr, present
	return tr, nil
}
