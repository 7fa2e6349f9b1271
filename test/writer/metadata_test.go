package writer

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

// The writer's copy of an object keeps only what a write needs (resourceVersion, status), not its
// labels, annotations or other producers' marks. A write made from that copy, with no read, leaves
// them as they are on the hub, and so does it with another producer's scores and conditions and
// the time its own condition last changed.
func TestWritesFromTheWritersCopyKeepWhatOthersSet(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{})
	ctx := context.Background()
	const cluster = "c4"
	resource := fmt.Sprintf("marked-%d", ids.Add(1))
	api := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(cluster)
	labels := map[string]string{"team": "gpu", "app.kubernetes.io/managed-by": "someone-else"}
	annotations := map[string]string{"example.com/note": "set by another controller"}
	obj, err := api.Create(ctx, &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: resource, Namespace: cluster, Labels: labels, Annotations: annotations}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	foreign := metav1.Condition{Type: "example.com/Checked", Status: metav1.ConditionFalse, Reason: "NotYet", Message: "another producer's condition",
		LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))}
	obj.Status.Scores = []clusterv1alpha1.AddOnPlacementScoreItem{{Name: "foreign", Value: 7}}
	obj.Status.Conditions = []metav1.Condition{foreign}
	if _, err := api.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	write := func(v float64) {
		t.Helper()
		status, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: resource, Items: []contract.ClusterScores{item(cluster, score("mine", v))}}))
		if r := result(t, reply); status != 200 || r.Items[0].Outcome != contract.OutcomeWritten {
			t.Fatalf("write %v: %d %+v", v, status, r)
		}
	}
	write(1) // reads the object: it exists, the writer did not create it
	first := meta.FindStatusCondition(get(t, cluster, resource).Status.Conditions, scorewriter.ConditionUpdated)
	time.Sleep(1100 * time.Millisecond) // a later write at the same second would hide a new transition time
	reads := s.apiRequests(t, "get")
	write(2)
	if n := s.apiRequests(t, "get") - reads; n != 0 {
		t.Fatalf("the second write read the object %.0f times: it was not made from the writer's copy", n)
	}

	got := get(t, cluster, resource)
	if !reflect.DeepEqual(got.Labels, labels) || !reflect.DeepEqual(got.Annotations, annotations) {
		t.Errorf("labels %v, annotations %v; want %v, %v as set", got.Labels, got.Annotations, labels, annotations)
	}
	if sc := scoresOf(got); sc["foreign"] != 7 || sc["mine"] != 2 {
		t.Errorf("scores %v, want foreign=7 and mine=2", sc)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, foreign.Type); c == nil || c.Message != foreign.Message || c.Reason != foreign.Reason ||
		!c.LastTransitionTime.Equal(&foreign.LastTransitionTime) {
		t.Errorf("another producer's condition: %+v, want %+v", c, foreign)
	}
	c := meta.FindStatusCondition(got.Status.Conditions, scorewriter.ConditionUpdated)
	if c == nil || first == nil || !c.LastTransitionTime.Equal(&first.LastTransitionTime) || c.Message == "" {
		t.Errorf("%s after the second write: %+v; want a message and the first write's transition time %v", scorewriter.ConditionUpdated, c, first)
	}
}
