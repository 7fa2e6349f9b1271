package writer

import (
	"context"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"

	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

// The real OCM placement controller picks the cluster with the top score. When that cluster's
// scorer stops sending, its score expires and the decision moves to the other cluster within
// validUntil and a few seconds: the writer's rewrite at expiry is what makes the Placement look.
func TestExpiredTopScoreMovesPlacementDecision(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const set, namespace, resource, scoreName = "expiry-set", "expiry-placement", "expiry-top", "top"
	if err := hub.AddClusterSet(ctx, set, namespace); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"expiry-a", "expiry-b"} {
		if err := hub.AddCluster(ctx, c, map[string]string{localhub.ClusterSetLabel: set}); err != nil {
			t.Fatal(err)
		}
		if err := hub.MarkAvailable(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	pc, err := hub.StartPlacementController(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Stop() })
	s := startWriter(t, serverOpts{})

	if _, err := hub.Cluster.ClusterV1beta1().Placements(namespace).Create(ctx, localhub.ScorePlacement(namespace, "top-score", set, resource, scoreName, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// b's scorer keeps its score valid: the controller, once up, chooses b.
	long := time.Now().Add(time.Hour)
	if status, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: resource, ValidUntil: &long, Items: []contract.ClusterScores{item("expiry-b", score(scoreName, 50))}})); status != http.StatusOK || result(t, reply).Failed() {
		t.Fatalf("b: %d", status)
	}
	if got := waitDecision(t, namespace, "top-score", "expiry-b", time.Now().Add(30*time.Second)); got != "expiry-b" {
		t.Fatalf("with only b scored the Placement chose %q, want expiry-b", got)
	}
	// a's score is higher but valid for only 4s.
	validUntil := time.Now().Add(4 * time.Second)
	if status, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: resource, ValidUntil: &validUntil, Items: []contract.ClusterScores{item("expiry-a", score(scoreName, 90))}})); status != http.StatusOK || result(t, reply).Failed() {
		t.Fatalf("a: %d", status)
	}
	if got := waitDecision(t, namespace, "top-score", "expiry-a", validUntil); got != "expiry-a" {
		t.Fatalf("before a's score expired the Placement chose %q, want expiry-a (score 90 over 50)", got)
	}

	// a's scorer is silent from now on.
	if got := waitDecision(t, namespace, "top-score", "expiry-b", validUntil.Add(5*time.Second)); got != "expiry-b" {
		t.Fatalf("5s after a's score expired the Placement still chooses %q, want expiry-b", got)
	}
	t.Logf("decision moved %s after a's validUntil", time.Since(validUntil).Round(100*time.Millisecond))
}

// waitDecision polls the Placement's decision until it is want or deadline passes; it returns the
// last decision seen ("" for none).
func waitDecision(t *testing.T, namespace, placement, want string, deadline time.Time) string {
	t.Helper()
	last := ""
	for {
		list, err := hub.Cluster.ClusterV1beta1().PlacementDecisions(namespace).List(context.Background(), metav1.ListOptions{
			LabelSelector: clusterv1beta1.PlacementLabel + "=" + placement,
		})
		if err != nil {
			t.Fatal(err)
		}
		last = ""
		for _, d := range list.Items {
			for _, cd := range d.Status.Decisions {
				last = cd.ClusterName
			}
		}
		if last == want || time.Now().After(deadline) {
			return last
		}
		time.Sleep(100 * time.Millisecond)
	}
}
