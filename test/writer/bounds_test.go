package writer

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

// Any sender can name any resource: the writer keeps at most --max-resources-per-cluster
// AddOnPlacementScores in a cluster's namespace and refuses to create one more, per item, with a
// reason that says so. Objects it already has keep being written. The objects are counted from
// the hub (its informer), so a writer started afresh counts those written before it.
func TestResourcesPerClusterAreBounded(t *testing.T) {
	t.Parallel()
	// A cluster of its own: every writer counts what any writer put in the namespace.
	if err := hub.AddCluster(context.Background(), "bounded", nil); err != nil {
		t.Fatal(err)
	}
	if err := hub.AcceptCluster(context.Background(), "bounded"); err != nil {
		t.Fatal(err)
	}
	s := startWriter(t, serverOpts{writer: scorewriter.Options{MaxResourcesPerCluster: 3}})
	send := func(resource string, v float64) (int, contract.ItemResult) {
		status, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: resource, Items: []contract.ClusterScores{item("bounded", score("a", v))}}))
		return status, result(t, reply).Items[0]
	}
	for i := range 3 {
		if status, r := send(fmt.Sprintf("bounded-%d", i), 1); status != http.StatusOK || r.Outcome != contract.OutcomeWritten {
			t.Fatalf("resource %d of 3: %d %+v", i, status, r)
		}
	}
	status, r := send("bounded-3", 1)
	if status != http.StatusUnprocessableEntity || r.Outcome != contract.OutcomeFailed || r.Reason != scorewriter.ReasonTooManyResources || r.Retriable {
		t.Errorf("a fourth resource: %d %+v, want 422 Failed TooManyResources", status, r)
	}
	if get(t, "bounded", "bounded-3") != nil {
		t.Error("the fourth AddOnPlacementScore was created")
	}
	if status, r := send("bounded-0", 2); status != http.StatusOK || r.Outcome != contract.OutcomeWritten {
		t.Errorf("an existing resource at the bound: %d %+v, want Written", status, r)
	}
	s = startWriter(t, serverOpts{writer: scorewriter.Options{MaxResourcesPerCluster: 3}})
	if status, r := send("bounded-4", 1); status != http.StatusUnprocessableEntity || r.Reason != scorewriter.ReasonTooManyResources {
		t.Errorf("a writer started afresh, a fourth resource: %d %+v, want 422 TooManyResources", status, r)
	}
}
