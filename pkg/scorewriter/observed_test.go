package scorewriter

import (
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"open-cluster-management.io/api/client/cluster/clientset/versioned/fake"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"
)

// A version the writer only read (a conflicting write made it read the hub: another replica had
// removed an expired score first) still moves the object's series when the informer shows it:
// the writer exported nothing for that version itself.
func TestSeriesFollowAVersionTheWriterOnlyRead(t *testing.T) {
	w, err := NewWriter(fake.NewSimpleClientset(), DefaultOptions(), NewMetrics(prometheus.NewRegistry(), func() float64 { return 0 }), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	key := Key{Cluster: "c1", Resource: "lapse"}
	version := func(rv string, names ...string) *clusterv1alpha1.AddOnPlacementScore {
		o := &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Namespace: key.Cluster, Name: key.Resource, ResourceVersion: rv}}
		for i, n := range names {
			o.Status.Scores = append(o.Status.Scores, clusterv1alpha1.AddOnPlacementScoreItem{Name: n, Value: int32(i + 1)})
		}
		return o
	}
	both, onlyLong := version("2", "long", "short"), version("3", "long")
	w.metrics.observe(key, true, w.clock.Now(), nil, both.Status.Scores) // this writer wrote version 2
	w.saw(key, onlyLong)                                                 // then read version 3
	w.observed(both, onlyLong)
	if n := seriesCount(w.metrics.score); n != 1 {
		t.Errorf("after the informer showed version 3: %d scoreflow_score series, want 1 (long)", n)
	}
}
