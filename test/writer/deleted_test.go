package writer

import (
	"context"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Someone deletes an AddOnPlacementScore the writer has written (kubectl delete, or the cluster's
// namespace re-created on re-import). The writer must notice on its next write: a newer event is
// written to a re-created object, and an observation it applied before (sent again under another
// id, as after a restart) is written again rather than acknowledged as a Duplicate or Stale
// from the writer's memory of an object the hub no longer has.
func TestDeletedObjectIsRecreated(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{})
	ctx := context.Background()
	observed := time.Now().Add(-time.Minute).Truncate(time.Second)
	data := contract.ScoreUpdated{Resource: "deleted", Items: []contract.ClusterScores{item("c2", score("a", 10))}}
	if status, reply := s.send(t, scoreEvent(t, observed, data)); status != http.StatusOK || result(t, reply).Items[0].Outcome != contract.OutcomeWritten {
		t.Fatalf("first write: %d %+v", status, result(t, reply))
	}
	if err := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("c2").Delete(ctx, "deleted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// The same observation again: nothing of it is on the hub, so it must be written.
	status, reply := s.send(t, scoreEvent(t, observed, data))
	if r := result(t, reply); status != http.StatusOK || r.Items[0].Outcome != contract.OutcomeWritten {
		t.Errorf("the applied observation, after the delete: %d %+v, want 200 Written", status, r.Items[0])
	}
	if got := scoresOf(get(t, "c2", "deleted")); got["a"] != 10 {
		t.Errorf("after re-sending the applied observation the hub has %v, want a=10", got)
	}

	// Deleted again (if it came back); a newer observation goes through the create path too.
	if err := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("c2").Delete(ctx, "deleted", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	newer := contract.ScoreUpdated{Resource: "deleted", Items: []contract.ClusterScores{item("c2", score("a", 20))}}
	status, reply = s.send(t, scoreEvent(t, observed.Add(time.Second), newer))
	if r := result(t, reply); status != http.StatusOK || r.Items[0].Outcome != contract.OutcomeWritten {
		t.Errorf("a newer observation, after the delete: %d %+v, want 200 Written", status, r.Items[0])
	}
	if got := scoresOf(get(t, "c2", "deleted")); got["a"] != 20 {
		t.Errorf("after a newer observation the hub has %v, want a=20", got)
	}
}
