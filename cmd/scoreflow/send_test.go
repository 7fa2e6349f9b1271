package main

import (
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/scoreflow/scoreflow/harness/localca"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

// TestSendTrustsTheRunsCA: scoreflow send's client, given the CA file `scoreflow run --tls`
// writes, completes a handshake with a server of that CA, which the default client refuses.
func TestSendTrustsTheRunsCA(t *testing.T) {
	ca, err := localca.New("run CA")
	if err != nil {
		t.Fatal(err)
	}
	crt, key, err := ca.Issue("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	defer srv.Close()

	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := clientTrusting(caFile)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Post(srv.URL, "application/json", nil)
	if err != nil {
		t.Fatalf("trusting the run's CA: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("status %d", resp.StatusCode)
	}
	def, _ := clientTrusting("")
	_, err = def.Post(srv.URL, "application/json", nil)
	var verr *tls.CertificateVerificationError
	if !errors.As(err, &verr) {
		t.Errorf("without the CA file: %v, want a failed certificate verification", err)
	}
	if _, err := clientTrusting(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("a missing CA file was accepted")
	}
}

// A score.updated sent with scoreflow send carries data.resource in the scoreflowresource
// extension, unless -e sets it; other types get none.
func TestSendStampsTheResource(t *testing.T) {
	for _, c := range []struct {
		typ, data, ext, want string
	}{
		{contract.TypeScoreUpdated, `{"resource":"manual","items":[]}`, "", "manual"},
		{contract.TypeScoreUpdated, `{"resource":"manual","items":[]}`, "other", "other"},
		{contract.TypeMetricChanged, `{"resource":"manual"}`, "", ""},
	} {
		e := cloudevents.NewEvent()
		e.SetType(c.typ)
		_ = e.SetData(cloudevents.ApplicationJSON, []byte(c.data))
		if c.ext != "" {
			e.SetExtension(contract.ExtResource, c.ext)
		}
		stampResource(&e)
		got, _ := e.Extensions()[contract.ExtResource].(string)
		if got != c.want {
			t.Errorf("%s %s (-e %q): scoreflowresource %q, want %q", c.typ, c.data, c.ext, got, c.want)
		}
	}
}
