package writer

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

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

// Made-up resources fill a cluster's quota of AddOnPlacementScores with scores that expire. Once
// every score of such an object has expired (a Placement counts a missing score as an expired
// one) and a grace period has passed, the writer deletes the object, and a legitimate new
// resource is written.
func TestExpiredJunkLeavesTheQuota(t *testing.T) {
	t.Parallel()
	const cluster = "junk"
	ctx := context.Background()
	if err := hub.AddCluster(ctx, cluster, nil); err != nil {
		t.Fatal(err)
	}
	if err := hub.AcceptCluster(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	const grace = 3 * time.Second
	s := startWriter(t, serverOpts{writer: scorewriter.Options{DeleteEmptyAfter: grace}})
	quota := scorewriter.DefaultOptions().MaxResourcesPerCluster
	validUntil := time.Now().Add(3 * time.Second)
	for i := range quota {
		status, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: fmt.Sprintf("junk-%02d", i), ValidUntil: &validUntil,
			Items: []contract.ClusterScores{item(cluster, score("x", 1))}}))
		if status != http.StatusOK || result(t, reply).Failed() {
			t.Fatalf("junk %d: %d %+v", i, status, result(t, reply))
		}
	}
	// An object without scores someone else made (it counts against the quota too): not the
	// writer's to delete.
	if _, err := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(cluster).Create(ctx, &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: cluster}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	send := func() (int, contract.ItemResult) {
		status, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "legitimate", Items: []contract.ClusterScores{item(cluster, score("a", 1))}}))
		return status, result(t, reply).Items[0]
	}
	if status, r := send(); status != http.StatusUnprocessableEntity || r.Reason != scorewriter.ReasonTooManyResources {
		t.Fatalf("a new resource with the quota full: %d %+v, want 422 TooManyResources", status, r)
	}
	// Emptied at their validUntil, deleted a grace period later.
	time.Sleep(time.Until(validUntil.Add(grace)))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		status, r := send()
		if status == http.StatusOK && r.Outcome == contract.OutcomeWritten {
			t.Logf("written %s after the junk's grace period", time.Since(validUntil.Add(grace)).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after the junk expired and its grace period passed, a new resource: %d %+v", time.Since(validUntil.Add(grace)).Round(time.Millisecond), status, r)
		}
	}
	// The last of the junk goes too (the new resource needed only one place).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		list, err := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(cluster).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, o := range list.Items {
			left = append(left, o.Name)
		}
		if slices.Equal(left, []string{"foreign", "legitimate"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster's objects: %v, want foreign and legitimate only", left)
		}
	}
}
