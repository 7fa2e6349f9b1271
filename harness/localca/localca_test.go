package localca_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/scoreflow/scoreflow/harness/localca"
)

// TestIssuedCertificateServesTLS serves an issued certificate on a real listener: a client
// trusting the CA completes the handshake for each name and address the certificate was issued
// for, and fails for another name or when it trusts another CA.
func TestIssuedCertificateServesTLS(t *testing.T) {
	ca, err := localca.New("test CA")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue("broker-ingress.knative-eventing.svc.cluster.local", "broker-ingress.knative-eventing.svc", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); _ = c.Close() }()
		}
	}()
	other, err := localca.New("another CA")
	if err != nil {
		t.Fatal(err)
	}
	handshake := func(serverName string, roots *x509.CertPool) error {
		c, err := tls.DialWithDialer(&net.Dialer{}, "tcp", ln.Addr().String(), &tls.Config{ServerName: serverName, RootCAs: roots})
		if err == nil {
			_ = c.Close()
		}
		return err
	}
	for _, name := range []string{"broker-ingress.knative-eventing.svc.cluster.local", "broker-ingress.knative-eventing.svc", "127.0.0.1"} {
		if err := handshake(name, ca.Pool()); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	var hostErr x509.HostnameError
	if err := handshake("broker-filter.knative-eventing.svc.cluster.local", ca.Pool()); !errors.As(err, &hostErr) {
		t.Errorf("a name the certificate was not issued for: %v, want a hostname error", err)
	}
	var authErr x509.UnknownAuthorityError
	if err := handshake("127.0.0.1", other.Pool()); !errors.As(err, &authErr) {
		t.Errorf("a client trusting another CA: %v, want an unknown authority error", err)
	}
	block, _ := pem.Decode(ca.PEM())
	if block == nil || !strings.Contains(string(ca.PEM()), "BEGIN CERTIFICATE") {
		t.Fatal("PEM holds no certificate")
	}
	if _, _, err := ca.Issue(); err == nil {
		t.Error("a certificate without names was issued")
	}
}
