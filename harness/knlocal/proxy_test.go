package knlocal

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/scoreflow/scoreflow/harness/localca"
	"github.com/scoreflow/scoreflow/harness/localhub"
)

// TestProxyTunnelsHTTPS resolves cluster Service names on a real hub, as cluster DNS and
// kube-proxy would: an https request through the proxy (CONNECT) reaches the endpoint of the
// Service's https port and completes a TLS handshake with it for the Service's name, the server
// seeing the plain request inside; plain http still goes to the http port's endpoint; a CONNECT
// to a name that is no cluster Service is refused with 502.
func TestProxyTunnelsHTTPS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hub.Stop() }()
	ca, err := localca.New("proxy test CA")
	if err != nil {
		t.Fatal(err)
	}
	const host = "broker-ingress.knative-eventing.svc.cluster.local"
	certPEM, keyPEM, err := ca.Issue(host)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	secure := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls %s %s", r.Host, r.URL.Path)
	}))
	secure.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	secure.StartTLS()
	defer secure.Close()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "plain %s %s", r.Host, r.URL.Path)
	}))
	defer plain.Close()

	k := &Knative{hub: hub, kube: hub.Kube}
	if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: SystemNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "broker-ingress", Namespace: SystemNamespace},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "https", Port: 443}}}}
	if _, err := hub.Kube.CoreV1().Services(SystemNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := k.publishEndpoints(ctx, SystemNamespace, "broker-ingress", []discoveryv1.EndpointPort{
		port("http", portOf(t, plain.URL)), port("https", portOf(t, secure.URL))}); err != nil {
		t.Fatal(err)
	}
	proxyCtx, stopProxy := context.WithCancel(ctx)
	defer stopProxy()
	p, err := newServiceProxy(proxyCtx, hub.Kube, ClusterDomain)
	if err != nil {
		t.Fatal(err)
	}
	proxySrv := httptest.NewServer(p)
	defer proxySrv.Close()
	proxyURL, _ := url.Parse(proxySrv.URL)

	client := func(roots *localca.CA) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: roots.Pool()}}}
	}
	get := func(c *http.Client, u string) (string, error) {
		var body string
		// The informers may not have seen the EndpointSlice yet.
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err := c.Get(u)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				body = fmt.Sprintf("%d %s", resp.StatusCode, b)
				if resp.StatusCode == http.StatusOK || time.Now().After(deadline) {
					return body, nil
				}
			} else if time.Now().After(deadline) || !strings.Contains(err.Error(), "Bad Gateway") {
				return "", err
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if got, err := get(client(ca), "https://"+host+"/scoreflow/scoreflow"); err != nil || got != "200 tls "+host+" /scoreflow/scoreflow" {
		t.Errorf("https through the proxy: %q, %v", got, err)
	}
	if got, err := get(client(ca), "http://"+host+"/x"); err != nil || got != "200 plain "+host+" /x" {
		t.Errorf("http through the proxy: %q, %v", got, err)
	}
	other, err := localca.New("another CA")
	if err != nil {
		t.Fatal(err)
	}
	_, err = client(other).Get("https://" + host + "/")
	var authErr *tls.CertificateVerificationError
	if !errors.As(err, &authErr) {
		t.Errorf("a client not trusting the CA, through the tunnel: %v, want a certificate verification error", err)
	}
	_, err = client(ca).Get("https://example.com/")
	if err == nil || !strings.Contains(err.Error(), "Bad Gateway") {
		t.Errorf("CONNECT to a name that is no cluster Service: %v, want 502 Bad Gateway", err)
	}

	// Stopping the proxy ends an open tunnel.
	conn, err := net.Dial("tcp", proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n", host, host)
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil || !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 200") {
		t.Fatalf("CONNECT answered %q, %v", buf[:n], err)
	}
	stopProxy()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(buf); !errors.Is(err, io.EOF) {
		t.Errorf("after the proxy stopped the tunnel read %v, want EOF", err)
	}
}

func portOf(t *testing.T, u string) int {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(parsed.Port())
	if err != nil {
		t.Fatal(err)
	}
	return p
}
