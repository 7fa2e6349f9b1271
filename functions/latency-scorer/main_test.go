package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

func TestMain(m *testing.M) { functest.Main(m, main) }

func TestHelpNamesEveryFlag(t *testing.T) {
	functest.Help(t, "--cluster", "--config-file", "--interval", "--targets-file  [env TARGETS_FILE]", "--sink  [env SINK]", "$K_SINK", "--ce-overrides  [env CE_OVERRIDES]", "$K_CE_OVERRIDES", "--port")
}

func TestNoKnativeEventingImport(t *testing.T) {
	if functest.Imports(t, "knative.dev/eventing") {
		t.Error("this function imports knative.dev/eventing")
	}
}

// TestAgentModeAsDeployed runs the binary as a SinkBinding configures it (K_SINK and
// K_CE_OVERRIDES in the environment, --cluster and --config-file from the Deployment) and checks
// the score.updated that reaches the sink.
func TestAgentModeAsDeployed(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer target.Close()
	sink := functest.NewSink(t, nil)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("resource: latency\nlatencies:\n- {name: hub-api, url: '"+target.URL+"', runs: 2, waitBetweenRuns: 100ms}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fn := functest.Start(t, []string{"K_SINK=" + sink.URL, `K_CE_OVERRIDES={"extensions":{"fromcluster":"east-1"}}`},
		"--cluster", "east-1", "--config-file", cfg, "--interval", "1h")

	select {
	case e := <-sink.Arrived():
		if e.Type() != contract.TypeScoreUpdated || e.Extensions()["fromcluster"] != "east-1" {
			t.Errorf("sink got %s with extensions %v", e.Type(), e.Extensions())
		}
		su, err := contract.DecodeScoreUpdated(&e)
		if err != nil || su.Items[0].Cluster != "east-1" || su.Items[0].Scores[0].Name != "hub-api" {
			t.Errorf("sink got %+v, %v", su, err)
		}
	case <-fn.Exited():
		t.Fatal("exited early")
	case <-time.After(20 * time.Second):
		t.Fatal("nothing reached K_SINK within 20s")
	}

	if code, _ := functest.Get(t, fn.URL+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d, want 200", code)
	}
	if _, body := functest.Get(t, fn.URL+"/metrics"); !strings.Contains(body, `scoreflow_latency_run_seconds_count{cluster="east-1",name="hub-api"} 2`) {
		t.Errorf("/metrics lacks the two runs:\n%s", body)
	}

	fn.Stop(t, 25*time.Second)
}

// TestHubModeAsDeployed runs the binary as deploy/latency-scorer.yaml does (TARGETS_FILE, a
// mounted ConfigMap): a ping measures a listed target, and one naming another URL is refused with
// nothing contacted. A targets file it cannot use stops it at start.
func TestHubModeAsDeployed(t *testing.T) {
	var listed, unlisted atomic.Int64
	count := func(n *atomic.Int64) *httptest.Server {
		s := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				n.Add(1)
			}
		}
		s.Start()
		t.Cleanup(s.Close)
		return s
	}
	ok, other := count(&listed), count(&unlisted)
	targets := filepath.Join(t.TempDir(), "targets.yaml")
	if err := os.WriteFile(targets, []byte("targets:\n- url: '"+ok.URL+"'\n  cluster: cluster1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fn := functest.Start(t, []string{"TARGETS_FILE=" + targets})
	for _, c := range []struct {
		url    string
		status int
	}{{other.URL, http.StatusBadRequest}, {ok.URL, http.StatusOK}} {
		status, reply := functest.Send(t, fn.URL, functest.Ping(`{"resource":"latency","latencies":[{"name":"ingress","cluster":"cluster1","url":"`+c.url+`","runs":1}]}`))
		if status != c.status {
			t.Errorf("ping naming %s: %d %v, want %d", c.url, status, reply, c.status)
		}
	}
	if listed.Load() != 1 || unlisted.Load() != 0 {
		t.Errorf("connections: listed %d, unlisted %d; want 1 and 0", listed.Load(), unlisted.Load())
	}
	fn.Stop(t, 10*time.Second)

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("targets:\n- url: '"+ok.URL+"'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := functest.Exec(t, []string{"TARGETS_FILE=" + bad}, "--port", "0"); code != 1 || !strings.Contains(out, "required on the hub") {
		t.Errorf("a hub target without a cluster: exit %d, output %s; want exit 1 naming the problem", code, out)
	}
}
