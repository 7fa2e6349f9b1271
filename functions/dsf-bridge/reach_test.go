package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

// listener counts the connections a real TCP listener accepts and what arrives on them: "nothing
// contacted" is measured at the socket, not inferred from a reply.
type listener struct {
	URL   string
	conns atomic.Int64
	mu    sync.Mutex
	seen  []string // method, path and Authorization of each request
}

func newListener(t *testing.T, answer http.HandlerFunc) *listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &listener{URL: "http://" + ln.Addr().String()}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l.mu.Lock()
			l.seen = append(l.seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
			l.mu.Unlock()
			answer(w, r)
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				l.conns.Add(1)
			}
		},
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l
}

// TestPingReachesOnlyWhatIsConfigured: a ping names a configured scorer and nothing else. Data
// naming a host, a configURL or a token file is refused before anything is read or contacted; a
// scorer's error answer is not echoed; names a ping invents grow no metric labels.
func TestPingReachesOnlyWhatIsConfigured(t *testing.T) {
	trap := newListener(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"results": [{"metric": {"cluster": "cluster1"}, "score": 1}]}`))
	})
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("file-secret-1234"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A configured scorer that fails with details in its answer.
	failing := newListener(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		http.Error(w, "Traceback: INTERNAL-DETAIL-42 at /srv/app/main.py", http.StatusInternalServerError)
	})
	scorers := filepath.Join(t.TempDir(), "scorers.yaml")
	if err := os.WriteFile(scorers, []byte(fmt.Sprintf(`apiVersion: dynamic-scoring.open-cluster-management.io/v1alpha1
kind: DynamicScorer
metadata: {name: failing-scorer}
spec:
  description: fails
  configURL: %s/config
  configSyncMode: None
  location: External
  scoreDestination: AddOnPlacementScore
  source: {type: None}
  scoring: {path: /scoring, params: {name: failing_score, interval: 60}}
`, failing.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	fn := functest.Start(t, []string{"PROMETHEUS_URL=http://127.0.0.1:1", "SCORERS_FILE=" + scorers, "ENDPOINTS=" + failing.URL})

	for _, data := range []string{
		// The whole DynamicScorer spec in the data: its scoring host and a token file.
		fmt.Sprintf(`{"source": {"type": "None"}, "scoring": {"host": %q, "path": "/scoring", "params": {"name": "trap_one"}, "auth": {"tokenFile": %q}}}`, trap.URL, secret),
		// A configURL on any host.
		fmt.Sprintf(`{"configURL": "%s/config"}`, trap.URL),
		fmt.Sprintf(`{"scorer": "failing-scorer", "configURL": "%s/config"}`, trap.URL),
		// A scorer nobody configured.
		`{"scorer": "trap-two"}`,
	} {
		status, reply := functest.Send(t, fn.URL, functest.Ping(data))
		_, fail := functest.Reply(t, reply)
		if status != http.StatusBadRequest || fail == nil || fail.Reason != contract.ReasonBadConfig {
			t.Errorf("%s: status %d failure %+v, want 400 BadConfig", data, status, fail)
		}
	}
	if n := trap.conns.Load(); n != 0 {
		trap.mu.Lock()
		t.Errorf("the listener a ping named got %d connections (requests %q), want none", n, trap.seen)
		trap.mu.Unlock()
	}

	status, reply := functest.Send(t, fn.URL, functest.Ping(`{"scorer": "failing-scorer"}`))
	_, fail := functest.Reply(t, reply)
	if status != http.StatusServiceUnavailable || fail == nil || !strings.Contains(fail.Message, "answered 500") {
		t.Fatalf("status %d failure %+v, want 503 naming the status", status, fail)
	}
	if strings.Contains(fail.Message, "INTERNAL-DETAIL") || strings.Contains(fn.Output(), "INTERNAL-DETAIL") {
		t.Errorf("the scorer's error answer is echoed: %q", fail.Message)
	}
	_, metrics := functest.Get(t, fn.URL+"/metrics")
	for _, invented := range []string{"trap_one", "trap-two"} {
		if strings.Contains(metrics, invented) {
			t.Errorf("/metrics has a label a ping invented (%s):\n%s", invented, metrics)
		}
	}
}
