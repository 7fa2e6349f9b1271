package writer

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// throttlingHub is a reverse proxy in front of the real kube-apiserver that answers 429 Too Many
// Requests to AddOnPlacementScore requests while throttling is on, as an overloaded hub (or its
// API priority and fairness) does, or holds each of them for a while before passing it on, as a
// slow one does, and counts those requests.
type throttlingHub struct {
	url       string
	until     atomic.Int64 // unix nanoseconds: throttle until then
	delay     atomic.Int64 // nanoseconds each AddOnPlacementScore request is held
	requests  atomic.Int64 // AddOnPlacementScore requests seen
	throttled atomic.Int64 // of which answered 429

	mu    sync.Mutex
	calls map[string]int // "METHOD path" of AddOnPlacementScore requests passed on -> how many

	closed chan struct{} // closed when the test ends: requests still held are let go
}

func newThrottlingHub(t testing.TB) *throttlingHub {
	t.Helper()
	proxy := hubProxy(t)
	p := &throttlingHub{calls: map[string]int{}, closed: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/addonplacementscores") {
			p.requests.Add(1)
			if d := time.Duration(p.delay.Load()); d > 0 {
				select {
				case <-time.After(d):
				case <-r.Context().Done():
					return
				case <-p.closed:
					return
				}
			}
			if time.Now().UnixNano() < p.until.Load() {
				p.throttled.Add(1)
				// No Retry-After: client-go would retry by itself and hide the writer's behaviour.
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				_ = json.NewEncoder(w).Encode(metav1.Status{
					TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
					Status:   metav1.StatusFailure, Code: http.StatusTooManyRequests,
					Reason: metav1.StatusReasonTooManyRequests, Message: "throttled by the test proxy",
				})
				return
			}
			p.mu.Lock()
			p.calls[r.Method+" "+r.URL.Path]++
			p.mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		close(p.closed)
		srv.Close()
	})
	p.url = srv.URL
	return p
}

// throttleFor answers 429 from now for d.
func (p *throttlingHub) throttleFor(d time.Duration) { p.until.Store(time.Now().Add(d).UnixNano()) }

// slowBy holds each AddOnPlacementScore request for d before passing it on (0: not at all).
func (p *throttlingHub) slowBy(d time.Duration) { p.delay.Store(int64(d)) }

// callsTo is how many requests METHOD path were passed on to the hub
// ("PUT /apis/cluster.open-cluster-management.io/v1alpha1/namespaces/c1/addonplacementscores/r/status").
func (p *throttlingHub) callsTo(method, path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[method+" "+path]
}

// config is a client configuration for the writer that goes through the proxy.
func (p *throttlingHub) config() *rest.Config {
	return &rest.Config{Host: p.url, QPS: 1000, Burst: 2000}
}

// hubProxy passes requests on to the test hub with its TLS and credentials, streaming watches as
// they come: the fault-injecting hubs of these tests are handlers in front of it.
func hubProxy(t testing.TB) *httputil.ReverseProxy {
	t.Helper()
	target, err := url.Parse(hub.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(hub.Config) // the hub's TLS and credentials
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = transport
	proxy.FlushInterval = -1
	return proxy
}
