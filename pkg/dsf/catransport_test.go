package dsf

import (
	"encoding/pem"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// TestCATransportFollowsTheFile: the CA file may be missing at start (the OpenShift service CA is
// injected into its ConfigMap later, and never on other clusters): the system's roots are used
// until it appears, then its CA is trusted without a restart.
func TestCATransportFollowsTheFile(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "service-ca.crt")
	tr, err := newTransport(caFile, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("a missing CA file: %v", err)
	}
	c := &http.Client{Transport: tr}
	if resp, err := c.Get(srv.URL); err == nil {
		_ = resp.Body.Close()
		t.Fatal("a server of an unknown CA was trusted")
	}
	if err := os.WriteFile(caFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if resp, err := c.Get(srv.URL); err == nil {
		_ = resp.Body.Close()
		t.Fatal("an empty CA file trusted a server")
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatalf("once the CA file holds the server's CA: %v", err)
	}
	_ = resp.Body.Close()
	if err := os.WriteFile(caFile, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(srv.URL); err == nil {
		t.Error("a CA file that holds no certificate went unnoticed")
	}
}
