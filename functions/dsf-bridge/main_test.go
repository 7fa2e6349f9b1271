package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

func TestMain(m *testing.M) { functest.Main(m, main) }

func TestNoKnativeEventingImport(t *testing.T) {
	if functest.Imports(t, "knative.dev/eventing") {
		t.Error("this function imports knative.dev/eventing")
	}
}

func TestHelp(t *testing.T) {
	functest.Help(t, "--cluster  [env CLUSTER]", "--scorers-file  [env SCORERS_FILE]", "--scorers-namespace  [env SCORERS_NAMESPACE]",
		"--endpoints  [env ENDPOINTS]", "--token-dir  [env TOKEN_DIR]", "--request-timeout  [env REQUEST_TIMEOUT]", "--max-retries  [env MAX_RETRIES]",
		"--hub-kubeconfig", "--secrets-namespace  [env SECRETS_NAMESPACE]", "--managed-kubeconfig  [env MANAGED_KUBECONFIG]", "--ca-file  [env CA_FILE]")
}

func TestBadStart(t *testing.T) {
	scorers := filepath.Join(t.TempDir(), "scorers.yaml")
	if err := os.WriteFile(scorers, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args  []string
		quote string
	}{
		{nil, "--scorers-file is required in hub mode"},
		{[]string{"--scorers-file=" + scorers}, "want dynamic-scoring.open-cluster-management.io/v1alpha1"},
		{[]string{"--endpoints=http://a/path=http://b"}, "--endpoints:"},
		{[]string{"--request-timeout=-1s"}, "timeout must be positive"},
		{[]string{"--cluster=kube-system"}, "--cluster:"},
		{[]string{"--cluster=cluster1"}, "needs --hub-kubeconfig"},
	}
	for _, tt := range tests {
		out, code := functest.Exec(t, nil, tt.args...)
		if code != 1 || !strings.Contains(out, tt.quote) {
			t.Errorf("%v: exit %d, output %s; want 1 and %q", tt.args, code, out, tt.quote)
		}
	}
}

// TestServe runs the binary in hub mode, configured by env, with a scorer of source type None
// whose results name their clusters: no Prometheus is asked.
func TestServe(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		_, _ = w.Write([]byte(`{"results": [{"metric": {"cluster": "worker01", "app": "app01", "device": "gpu0"}, "score": -250},
			{"metric": {"cluster": "worker02", "app": "app01", "device": "gpu0"}, "score": 80.9}]}`))
	}))
	defer s.Close()
	scorers := filepath.Join(t.TempDir(), "scorers.yaml")
	if err := os.WriteFile(scorers, []byte(`apiVersion: dynamic-scoring.open-cluster-management.io/v1alpha1
kind: DynamicScorer
metadata: {name: example-powerconsumption-scorer}
spec:
  description: static
  configURL: http://static-scorer:8000/powerconsumption/config
  configSyncMode: None
  location: Internal
  scoreDestination: AddOnPlacementScore
  scoreDimensionFormat: "${app};${device}"
  source: {type: None}
  scoring: {path: /powerconsumption/scoring, params: {name: example_powerconsumption_score, interval: 30}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	fn := functest.Start(t, []string{"SCORERS_FILE=" + scorers, "ENDPOINTS=http://static-scorer:8000=" + s.URL, "REQUEST_TIMEOUT=5s"})
	status, reply := functest.Send(t, fn.URL, functest.Ping(`{"scorer": "example-powerconsumption-scorer"}`))
	if status != http.StatusOK || reply == nil {
		t.Fatalf("status %d reply %v", status, reply)
	}
	got, err := contract.DecodeScoreUpdated(reply)
	if err != nil {
		t.Fatal(err)
	}
	// -250 is clamped to -100; 80.9 truncated to 80, as DSF's int32(score).
	want := []contract.ClusterScores{{Cluster: "worker01", Scores: []contract.Score{{Name: "app01;gpu0", Value: -100}}}, {Cluster: "worker02", Scores: []contract.Score{{Name: "app01;gpu0", Value: 80}}}}
	if got.Resource != "example-powerconsumption-score" || !reflect.DeepEqual(got.Items, want) {
		t.Errorf("got %s %+v, want example-powerconsumption-score %+v", got.Resource, got.Items, want)
	}
	_, body := functest.Get(t, fn.URL+"/metrics")
	if !strings.Contains(body, `scoreflow_dsf_scores_clamped_total{scorer="example-powerconsumption-scorer"} 1`) {
		t.Errorf("/metrics does not count the clamped score:\n%s", body)
	}
}
