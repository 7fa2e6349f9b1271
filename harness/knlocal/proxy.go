package knlocal

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
)

// serviceProxy stands in for cluster DNS and kube-proxy. Knative's data plane (ingress, filter,
// dispatcher, sources) and the functions send to `<svc>.<ns>.svc.cluster.local` through it as their
// HTTP_PROXY; it resolves the name the way a cluster would (Service, ExternalName chains, the
// Service port's name, the EndpointSlice port of that name) and forwards to 127.0.0.1:<port>,
// keeping the Host header, which the in-memory channel dispatcher routes by. https (HTTPS_PROXY,
// with Knative's transport encryption) is a CONNECT tunnel to the endpoint of the same name's
// https port; the TLS inside is between the client and the server. Loopback addresses bypass it
// (Go's ProxyFromEnvironment never proxies them).
type serviceProxy struct {
	services corelisters.ServiceLister
	slices   discoverylisters.EndpointSliceLister
	proxy    *httputil.ReverseProxy
	domain   string
	ctx      context.Context // ends the open tunnels
}

// newServiceProxy builds the proxy on informers, so that resolving costs no API request (a
// per-request GET hits client-go's rate limit and adds seconds per hop).
func newServiceProxy(ctx context.Context, kube kubernetes.Interface, domain string) (*serviceProxy, error) {
	f := informers.NewSharedInformerFactory(kube, 10*time.Minute)
	p := &serviceProxy{
		services: f.Core().V1().Services().Lister(),
		slices:   f.Discovery().V1().EndpointSlices().Lister(),
		domain:   domain,
		ctx:      ctx,
	}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("service proxy: %v informer did not sync", typ)
		}
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil
	transport.MaxIdleConnsPerHost = 100
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme = "http"
			r.Out.URL.Host = r.In.Context().Value(targetKey{}).(string)
			r.Out.Host = r.In.Host
		},
		Transport:     transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, "service proxy: "+err.Error(), http.StatusBadGateway)
		},
	}
	return p, nil
}

type targetKey struct{}

func (p *serviceProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.tunnel(w, r)
		return
	}
	host := r.URL.Host
	if host == "" {
		host = r.Host
	}
	target, err := p.resolve(host)
	if err != nil {
		http.Error(w, "service proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	p.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, target)))
}

// tunnel answers CONNECT host:port: it resolves the name as for plain HTTP, dials the endpoint and
// copies bytes both ways until either side closes (or the proxy stops).
func (p *serviceProxy) tunnel(w http.ResponseWriter, r *http.Request) {
	target, err := p.resolve(r.Host)
	if err != nil {
		http.Error(w, "service proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	up, err := net.DialTimeout("tcp", target, 10*time.Second)
	if err != nil {
		http.Error(w, "service proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = up.Close()
		http.Error(w, "service proxy: cannot tunnel on this connection", http.StatusInternalServerError)
		return
	}
	down, buf, err := hj.Hijack()
	if err != nil {
		_ = up.Close()
		return
	}
	closeBoth := func() { _ = up.Close(); _ = down.Close() }
	stop := context.AfterFunc(p.ctx, closeBoth)
	defer stop()
	if _, err := down.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		closeBoth()
		return
	}
	// What the client sent after the CONNECT request (its TLS hello, usually) may sit in buf.
	if n := buf.Reader.Buffered(); n > 0 {
		early, _ := buf.Reader.Peek(n)
		if _, err := up.Write(early); err != nil {
			closeBoth()
			return
		}
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, down); done <- struct{}{} }()
	go func() { _, _ = io.Copy(down, up); done <- struct{}{} }()
	<-done
	closeBoth()
	<-done
}

// resolve maps host[:port] of a cluster Service to the local address that serves it.
func (p *serviceProxy) resolve(hostport string) (string, error) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		host, portStr = hostport, "80"
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return "", fmt.Errorf("bad port in %q", hostport)
	}
	for hops := 0; hops < 5; hops++ {
		name, ns, ok := p.serviceName(host)
		if !ok {
			return "", fmt.Errorf("%s is not a cluster service name", host)
		}
		svc, err := p.services.Services(ns).Get(name)
		if err != nil {
			return "", fmt.Errorf("service %s/%s: %w", ns, name, err)
		}
		if svc.Spec.Type == corev1.ServiceTypeExternalName {
			host = svc.Spec.ExternalName
			continue
		}
		return p.endpoint(svc, port)
	}
	return "", fmt.Errorf("%s: too many ExternalName hops", hostport)
}

// serviceName parses <svc>.<ns>[.svc[.<domain>]].
func (p *serviceProxy) serviceName(host string) (name, namespace string, ok bool) {
	host = strings.TrimSuffix(strings.TrimSuffix(host, "."), "."+p.domain)
	host = strings.TrimSuffix(host, ".svc")
	parts := strings.Split(host, ".")
	if len(parts) != 2 {
		return "", "", false
	}
	return parts[0], parts[1], true
}

func (p *serviceProxy) endpoint(svc *corev1.Service, port int) (string, error) {
	var portName string
	found := false
	for _, sp := range svc.Spec.Ports {
		if int(sp.Port) == port {
			portName, found = sp.Name, true
			break
		}
	}
	if !found {
		return "", fmt.Errorf("service %s/%s has no port %d", svc.Namespace, svc.Name, port)
	}
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc.Name})
	slices, err := p.slices.EndpointSlices(svc.Namespace).List(sel)
	if err != nil {
		return "", err
	}
	for _, s := range slices {
		if !anyReady(s.Endpoints) {
			continue
		}
		for _, sp := range s.Ports {
			if sp.Port != nil && sp.Name != nil && *sp.Name == portName {
				return fmt.Sprintf("127.0.0.1:%d", *sp.Port), nil
			}
		}
	}
	return "", fmt.Errorf("service %s/%s port %q has no ready local endpoint", svc.Namespace, svc.Name, portName)
}

func anyReady(eps []discoveryv1.Endpoint) bool {
	for _, e := range eps {
		if e.Conditions.Ready == nil || *e.Conditions.Ready {
			return true
		}
	}
	return false
}
