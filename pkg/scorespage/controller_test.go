package scorespage

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"

	"github.com/scoreflow/scoreflow/harness/localhub"
)

// The page's why is the placement controller's own arithmetic. Against the real controller, in
// Additive mode (Balance and Steady at weight 1 besides the AddOn score): the totals the page shows
// for each cluster are those the controller computes (its debug endpoint schedules the Placement
// on the current state and answers every prioritizer's scores), and the cluster the page ranks
// first is the one chosen. That holds where the AddOn score alone would rank the other
// cluster first (Steady keeps the decision) and where another Placement's decision moves it
// (Balance).
func TestWhyMatchesThePlacementController(t *testing.T) {
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const ns, other, set = "scoreflow", "elsewhere", "demo"
	must(hub.AddClusterSet(ctx, set, ns))
	must(hub.AddClusterSet(ctx, set, other))
	for _, c := range []string{"cluster1", "cluster2"} {
		must(hub.AddCluster(ctx, c, map[string]string{localhub.ClusterSetLabel: set}))
		must(hub.MarkAvailable(ctx, c))
	}
	logFile, err := os.Create(filepath.Join(t.TempDir(), "placement.log"))
	must(err)
	pc, err := hub.StartPlacementController(logFile)
	must(err)
	t.Cleanup(func() { _ = pc.Stop() })

	page := New(hub.Cluster, Options{})
	go page.Run(ctx)
	for page.Ready() != nil {
		if ctx.Err() != nil {
			t.Fatal("the page did not list the hub")
		}
		time.Sleep(20 * time.Millisecond)
	}

	setScore := func(cluster, resource, name string, v int32) {
		t.Helper()
		api := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(cluster)
		o, err := api.Get(ctx, resource, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			o, err = api.Create(ctx, &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: resource, Namespace: cluster}}, metav1.CreateOptions{})
		}
		must(err)
		o.Status.Scores = []clusterv1alpha1.AddOnPlacementScoreItem{{Name: name, Value: v}}
		_, err = api.UpdateStatus(ctx, o, metav1.UpdateOptions{})
		must(err)
	}
	setScore("cluster1", "demo", "value", 80)
	setScore("cluster2", "demo", "value", 20)
	pl := localhub.ScorePlacement(ns, "pl", set, "demo", "value", 1)
	pl.Spec.PrioritizerPolicy.Mode = clusterv1beta1.PrioritizerPolicyModeAdditive
	_, err = hub.Cluster.ClusterV1beta1().Placements(ns).Create(ctx, pl, metav1.CreateOptions{})
	must(err)

	// step waits until the controller has decided want and reported the totals, and the page shows
	// the same decision, ranks it first and gives every cluster the controller's total.
	step := func(name string, want string, totals map[string]int64) {
		t.Helper()
		var reported map[string]int64
		var seen string
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			reported = controllerTotals(ctx, t, pc, ns, "pl")
			var pv PlacementView
			for _, p := range page.Snapshot().Placements {
				if p.Namespace == ns && p.Name == "pl" {
					pv = p
				}
			}
			got := map[string]int64{}
			var first string
			for i, w := range pv.Current.Why {
				got[w.Cluster] = w.Total
				if i == 0 {
					first = w.Cluster
				}
			}
			seen = fmt.Sprintf("page decision %v, ranks first %s, totals %v", pv.Current.Clusters, first, got)
			if maps.Equal(reported, totals) && strings.Join(pv.Current.Clusters, ",") == want && first == want && maps.Equal(got, totals) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: want the decision %s with totals %v from both; controller computes %v; %s", name, want, totals, reported, seen)
			}
		}
	}
	// Balance 100 each (no other Placement); Steady 100 for the held cluster once it is held.
	step("first decision", "cluster1", map[string]int64{"cluster1": 80 + 100 + 100, "cluster2": 20 + 100})
	// Swapped: the AddOn score alone ranks cluster2 first, but Steady keeps cluster1.
	setScore("cluster1", "demo", "value", 20)
	setScore("cluster2", "demo", "value", 80)
	step("swapped", "cluster1", map[string]int64{"cluster1": 20 + 100 + 100, "cluster2": 80 + 100})

	// Another Placement takes cluster1: Balance now gives it -100 for pl, which moves pl to
	// cluster2 when it is next scheduled (a score change requeues it).
	pin := localhub.ScorePlacement(other, "pin", set, "pin", "x", 1)
	_, err = hub.Cluster.ClusterV1beta1().Placements(other).Create(ctx, pin, metav1.CreateOptions{})
	must(err)
	setScore("cluster1", "pin", "x", 100)
	waitDecision(ctx, t, hub, other, "pin", "cluster1")
	setScore("cluster2", "demo", "value", 81)
	step("another Placement holds cluster1", "cluster2", map[string]int64{"cluster1": 20 - 100, "cluster2": 81 + 100 + 100})
}

// controllerTotals is each cluster's total as the controller computes it now: the sum over its
// prioritizers of weight x score.
func controllerTotals(ctx context.Context, t *testing.T, pc *localhub.PlacementController, ns, placement string) map[string]int64 {
	t.Helper()
	results, err := pc.Prioritize(ctx, ns, placement)
	if err != nil {
		t.Fatal(err)
	}
	totals := map[string]int64{}
	for _, r := range results {
		for c, v := range r.Scores {
			totals[c] += int64(r.Weight) * v
		}
	}
	return totals
}

func waitDecision(ctx context.Context, t *testing.T, hub *localhub.Hub, ns, placement, want string) {
	t.Helper()
	var got []string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ds, err := hub.Cluster.ClusterV1beta1().PlacementDecisions(ns).List(ctx, metav1.ListOptions{LabelSelector: clusterv1beta1.PlacementLabel + "=" + placement})
		if err != nil {
			t.Fatal(err)
		}
		got = nil
		for _, d := range ds.Items {
			for _, c := range d.Status.Decisions {
				got = append(got, c.ClusterName)
			}
		}
		if strings.Join(got, ",") == want {
			return
		}
	}
	t.Fatalf("%s/%s decides %v, want %s", ns, placement, got, want)
}
