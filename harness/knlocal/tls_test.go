package knlocal

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/scoreflow/scoreflow/harness/localca"
	"github.com/scoreflow/scoreflow/harness/localhub"
)

// TestServerSecretsVerifyForKnativeNames issues the data plane's server Secrets from Knative's own
// cert-manager Certificates and checks them against what Knative's code reads and its clients
// check: the Secret names of knative.dev/eventing pkg/eventingtls (the ingress, filter and
// dispatcher load them by name), tls.crt and tls.key forming a key pair (tls.X509KeyPair, as
// eventingtls.GetCertificateFromSecret loads them), and tls.crt verifying against ca.crt (the
// CACerts the reconcilers publish) for the hosts of the https addresses the Broker, Trigger and
// InMemoryChannel reconcilers build. A Service certificate of IssueServiceCert verifies for the
// names and address a ksvc's caller uses.
func TestServerSecretsVerifyForKnativeNames(t *testing.T) {
	mod, err := localhub.ModuleDir(EventingModule)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := localca.New("test CA")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := ReadFiles(filepath.Join(mod, "config", certificateDirs[0]), filepath.Join(mod, "config", certificateDirs[1]))
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := serverSecrets(ca, objs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{ // Secret -> the host of the https address clients send to
		"mt-broker-ingress-server-tls": "broker-ingress.knative-eventing.svc.cluster.local",
		"mt-broker-filter-server-tls":  "broker-filter.knative-eventing.svc.cluster.local",
		"imc-dispatcher-server-tls":    "imc-dispatcher.knative-eventing.svc.cluster.local",
	}
	if len(secrets) != len(want) {
		t.Errorf("%d Secrets, want %d", len(secrets), len(want))
	}
	for _, s := range secrets {
		host, ok := want[s.Name]
		if !ok {
			t.Errorf("unexpected Secret %s", s.Name)
			continue
		}
		if s.Namespace != SystemNamespace {
			t.Errorf("Secret %s in namespace %q, want %s", s.Name, s.Namespace, SystemNamespace)
		}
		if _, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"]); err != nil {
			t.Errorf("%s: tls.crt and tls.key: %v", s.Name, err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(s.Data["ca.crt"]) {
			t.Fatalf("%s: ca.crt holds no certificate", s.Name)
		}
		for _, name := range []string{host, host[:len(host)-len(".cluster.local")], "127.0.0.1"} {
			if err := verify(s.Data["tls.crt"], roots, name); err != nil {
				t.Errorf("%s for %s: %v", s.Name, name, err)
			}
		}
		if err := verify(s.Data["tls.crt"], roots, "other.knative-eventing.svc.cluster.local"); err == nil {
			t.Errorf("%s verifies for a name it was not issued for", s.Name)
		}
		other, _ := localca.New("other")
		if err := verify(s.Data["tls.crt"], other.Pool(), host); err == nil {
			t.Errorf("%s verifies against another CA", s.Name)
		}
	}

	k := &Knative{CA: ca}
	dir := t.TempDir()
	certFile, keyFile, err := k.IssueServiceCert("scoreflow", "score-writer", dir)
	if err != nil {
		t.Fatal(err)
	}
	crt, _ := os.ReadFile(certFile)
	key, _ := os.ReadFile(keyFile)
	if _, err := tls.X509KeyPair(crt, key); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"score-writer.scoreflow.svc.cluster.local", "score-writer.scoreflow.svc", "127.0.0.1"} {
		if err := verify(crt, ca.Pool(), name); err != nil {
			t.Errorf("the Service certificate for %s: %v", name, err)
		}
	}
	if _, _, err := (&Knative{}).IssueServiceCert("scoreflow", "x", dir); err == nil {
		t.Error("a Service certificate was issued with transport encryption off")
	}
}

func verify(certPEM []byte, roots *x509.CertPool, name string) error {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return os.ErrInvalid
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	_, err = c.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}
