package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/scoreflow/scoreflow/harness/devrun"
	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/promlocal"
)

// TestDSFScorerThroughOnePingSource: a Dynamic Scoring Framework scorer written from DSF's
// documented API alone (pkg/dsf/testdata/dsf_scorer.py, Python's standard library, no scoreflow
// code) scores the demo clusters through one PingSource, admitted by Knative's webhook and fired by
// its PingSource adapter: broker, Trigger, dsf-bridge, Prometheus, the scorer, the score-writer,
// AddOnPlacementScores on the hub.
func TestDSFScorerThroughOnePingSource(t *testing.T) {
	scorerURL := functest.Python(t, nil, filepath.Join("..", "..", "pkg", "dsf", "testdata", "dsf_scorer.py"), "sample")

	// Constant per cluster over the last minutes, so the scorer's mean is the value whatever grid
	// the bridge's range falls on: 70, 20, and -250 (clamped to -100).
	want := map[string]float64{"cluster1": 70, "cluster2": 20, "cluster3": -250}
	now := promlocal.Aligned(time.Minute)
	var series []promlocal.Series
	for c, v := range want {
		series = append(series, promlocal.Grid(map[string]string{"__name__": "dsf_e2e_load", "cluster": c}, now, time.Minute, v, v, v, v, v, v))
	}
	stack.Prometheus.MustPush(t, series...)

	// One PingSource, as a user migrating a DynamicScorer writes it (docs/dsf.md): Knative's mtping
	// fires it at the next minute, the broker routes it to the dsf-bridge by its extension.
	data := fmt.Sprintf(`{"configURL": "%s/config", "configSyncMode": "None", "source": {"type": "Prometheus", "path": "/api/v1/query_range", "params": {"query": "dsf_e2e_load", "range": 120, "step": 60}}, "scoring": {"path": "/scoring", "params": {"name": "dsf_e2e_score", "interval": 60}}}`, scorerURL)
	if err := applyYAML(context.Background(), fmt.Sprintf(`
apiVersion: sources.knative.dev/v1
kind: PingSource
metadata: {name: dsf-e2e, namespace: %s}
spec:
  schedule: "* * * * *"
  contentType: application/json
  data: '%s'
  ceOverrides: {extensions: {scorer: dsf-bridge}}
  sink: {ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: scoreflow}}
`, devrun.Namespace, data)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = applyDelete(context.Background(), "sources.knative.dev", "v1", "PingSource", devrun.Namespace, "dsf-e2e")
	})

	expect := map[string]int32{"cluster1": 70, "cluster2": 20, "cluster3": -100}
	got := map[string]int32{}
	eventually(t, 100*time.Second, "the DSF scorer's scores did not reach the hub", func() bool {
		for c := range expect {
			obj, err := stack.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(c).Get(context.Background(), "dsf-e2e-score", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range obj.Status.Scores {
				if s.Name == "dsf_e2e_score" {
					got[c] = s.Value
				}
			}
		}
		return reflect.DeepEqual(got, expect)
	})
}
