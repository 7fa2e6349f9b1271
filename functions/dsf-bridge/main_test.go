package main

import (
	"fmt"
	"net/http"
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
	functest.Help(t, "--prometheus-url  [env PROMETHEUS_URL]", "--prometheus-token-file", "--scorer-timeout  [env SCORER_TIMEOUT]", "--token-dir  [env TOKEN_DIR]")
}

func TestBadStart(t *testing.T) {
	tests := []struct {
		args  []string
		quote string
	}{
		{nil, "--prometheus-url is required"},
		{[]string{"--prometheus-url=http://x:9090", "--scorer-timeout=0s"}, "--scorer-timeout must be positive"},
	}
	for _, tt := range tests {
		out, code := functest.Exec(t, nil, tt.args...)
		if code != 1 || !strings.Contains(out, tt.quote) {
			t.Errorf("%v: exit %d, output %s; want 1 and %q", tt.args, code, out, tt.quote)
		}
	}
}

// TestServe runs the binary, configured by env, against DSF's static scorer in Python (source
// type None: no Prometheus is asked).
func TestServe(t *testing.T) {
	scorerURL := functest.Python(t, nil, filepath.Join("..", "..", "pkg", "dsf", "testdata", "dsf_scorer.py"), "static")

	fn := functest.Start(t, []string{"PROMETHEUS_URL=http://127.0.0.1:1", "SCORER_TIMEOUT=5s"})
	status, reply := functest.Send(t, fn.URL, functest.Ping(fmt.Sprintf(`{"configURL": "%s/powerconsumption/config", "scoreDimensionFormat": "${app};${device}"}`, scorerURL)))
	if status != http.StatusOK || reply == nil {
		t.Fatalf("status %d reply %v", status, reply)
	}
	got, err := contract.DecodeScoreUpdated(reply)
	if err != nil {
		t.Fatal(err)
	}
	// -250 is clamped to -100.
	want := []contract.ClusterScores{{Cluster: "worker01", Scores: []contract.Score{{Name: "app01;gpu0", Value: -100}}}, {Cluster: "worker02", Scores: []contract.Score{{Name: "app01;gpu0", Value: 80}}}}
	if got.Resource != "example-powerconsumption-score" || !reflect.DeepEqual(got.Items, want) {
		t.Errorf("got %s %+v, want example-powerconsumption-score %+v", got.Resource, got.Items, want)
	}
	_, body := functest.Get(t, fn.URL+"/metrics")
	if !strings.Contains(body, `scoreflow_dsf_scores_clamped_total{scorer="example_powerconsumption_score"} 1`) {
		t.Errorf("/metrics does not count the clamped score:\n%s", body)
	}
}
