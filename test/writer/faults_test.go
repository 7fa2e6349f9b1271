package writer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/scoreflow/scoreflow/harness/localhub"
)

// faultyHub is a reverse proxy in front of the real kube-apiserver that injects what a hub does
// on its own now and then: a ManagedCluster list slower than the AddOnPlacementScore one (a hub
// with many clusters and few scores), and an AddOnPlacementScore watch that goes silent and then
// expires (410 Gone), after which an informer lists everything again.
type faultyHub struct {
	url string
	// clusterDelay holds each ManagedCluster request this long (nanoseconds) before passing it on.
	clusterDelay atomic.Int64

	mu      sync.Mutex
	frozen  bool
	thawed  chan struct{}                        // closed when the watches thaw
	watches map[*http.Request]context.CancelFunc // AddOnPlacementScore watches passed on
}

func newFaultyHub(t testing.TB) *faultyHub {
	t.Helper()
	proxy := hubProxy(t)
	p := &faultyHub{watches: map[*http.Request]context.CancelFunc{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/managedclusters") {
			select {
			case <-time.After(time.Duration(p.clusterDelay.Load())):
			case <-r.Context().Done():
				return
			}
		}
		if strings.Contains(r.URL.Path, "/addonplacementscores") && r.URL.Query().Get("watch") != "" {
			p.watch(w, r, proxy)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

// watch passes an AddOnPlacementScore watch on, unless the watches are frozen: then it holds the
// watch open without an event until they thaw, and ends it with 410 Gone, as the API server ends
// a watch whose resourceVersion it no longer has.
func (p *faultyHub) watch(w http.ResponseWriter, r *http.Request, proxy *httputil.ReverseProxy) {
	p.mu.Lock()
	if p.frozen {
		thawed := p.thawed
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-thawed:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write([]byte(`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",` +
			`"message":"too old resource version (faultyHub)","reason":"Expired","code":410}}` + "\n"))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	p.watches[r] = cancel
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.watches, r)
		p.mu.Unlock()
		cancel()
	}()
	proxy.ServeHTTP(w, r.WithContext(ctx))
}

// freeze cuts the AddOnPlacementScore watches under way and holds every new one without an
// event: informers behind the proxy hear of no change from now on.
func (p *faultyHub) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen, p.thawed = true, make(chan struct{})
	for _, cancel := range p.watches {
		cancel()
	}
}

// expire ends the frozen watches with 410 Gone and passes new ones on again: informers behind
// the proxy list every object afresh (a relist) and watch from there.
func (p *faultyHub) expire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		p.frozen = false
		close(p.thawed)
	}
}

// config is a client configuration that goes through the proxy.
func (p *faultyHub) config() *rest.Config {
	return &rest.Config{Host: p.url, QPS: 1000, Burst: 2000}
}

// kubeconfig writes a kubeconfig that goes through the proxy, for the writer binary.
func (p *faultyHub) kubeconfig(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "faulty.kubeconfig")
	if err := localhub.WriteKubeconfig(p.config(), path); err != nil {
		t.Fatal(err)
	}
	return path
}
