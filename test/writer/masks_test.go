package writer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"

	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/masks"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

// TestMasksMoveTheDecision runs the writer as its main wires it with a mask file, and the real
// OCM placement controller choosing the cluster with the highest load/free score: masking the
// chosen cluster's score removes it from its AddOnPlacementScore, which moves the decision; while
// masked, its updates are answered Masked and not written; unmasked, the next update is written
// and the decision moves back.
func TestMasksMoveTheDecision(t *testing.T) {
	ctx := context.Background()
	const set, ns, resource, name = "masks", "masks-test", "load", "free"
	clusters := []string{"m1", "m2", "m3"}
	if err := hub.AddClusterSet(ctx, set, ns); err != nil {
		t.Fatal(err)
	}
	for _, c := range clusters {
		if err := hub.AddCluster(ctx, c, map[string]string{localhub.ClusterSetLabel: set}); err != nil {
			t.Fatal(err)
		}
		if err := hub.MarkAvailable(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	logs, err := os.Create(filepath.Join(t.TempDir(), "placement.log"))
	if err != nil {
		t.Fatal(err)
	}
	pc, err := hub.StartPlacementController(logs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Stop() })
	if _, err := hub.Cluster.ClusterV1beta1().Placements(ns).Create(ctx, localhub.ScorePlacement(ns, "most-free", set, resource, name, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	maskPath := filepath.Join(t.TempDir(), "masks.yaml")
	publish := func(content string) {
		t.Helper()
		tmp := maskPath + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, maskPath); err != nil { // atomic, as a ConfigMap update is
			t.Fatal(err)
		}
	}
	publish("[]\n")
	srv := startMaskedWriter(t, maskPath)

	observed := time.Now().Add(-time.Minute)
	send := func(values map[string]float64) *contract.WriteResult {
		t.Helper()
		observed = observed.Add(time.Second)
		su := contract.ScoreUpdated{Resource: resource}
		for _, c := range clusters {
			su.Items = append(su.Items, item(c, score(name, values[c])))
		}
		status, reply := srv.send(t, scoreEvent(t, observed, su))
		if status != http.StatusOK {
			t.Fatalf("status %d reply %v", status, reply)
		}
		return result(t, reply)
	}
	outcome := func(r *contract.WriteResult, cluster string) contract.ItemResult {
		for _, it := range r.Items {
			if it.Cluster == cluster {
				return it
			}
		}
		t.Fatalf("no item for %s in %+v", cluster, r)
		return contract.ItemResult{}
	}
	waitDecision := func(want string) {
		t.Helper()
		var got []string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			list, err := hub.Cluster.ClusterV1beta1().PlacementDecisions(ns).List(ctx, metav1.ListOptions{LabelSelector: clusterv1beta1.PlacementLabel + "=most-free"})
			if err != nil {
				t.Fatal(err)
			}
			got = nil
			for _, d := range list.Items {
				for _, cd := range d.Status.Decisions {
					got = append(got, cd.ClusterName)
				}
			}
			sort.Strings(got)
			if reflect.DeepEqual(got, []string{want}) {
				return
			}
		}
		t.Fatalf("decision %v, want [%s]", got, want)
	}
	scoresOf := func(cluster string) map[string]int32 {
		out := map[string]int32{}
		if obj := get(t, cluster, resource); obj != nil {
			for _, s := range obj.Status.Scores {
				out[s.Name] = s.Value
			}
		}
		return out
	}

	send(map[string]float64{"m1": 90, "m2": 50, "m3": 10})
	waitDecision("m1")

	// Mask m1's score: it leaves m1's object without any update (a missing score counts 0), and
	// the placement moves to m2.
	publish("- {cluster: m1, resource: load, score: free}\n")
	waitDecision("m2")
	if got := scoresOf("m1"); len(got) != 0 {
		t.Errorf("m1's masked score is still on its object: %v", got)
	}

	// While masked, m1's updates are not written, and the reply says why.
	r := send(map[string]float64{"m1": 95, "m2": 50, "m3": 10})
	if it := outcome(r, "m1"); it.Outcome != contract.OutcomeSkipped || it.Reason != contract.ReasonMasked {
		t.Errorf("m1 while masked: %+v, want Skipped Masked", it)
	}
	if it := outcome(r, "m2"); it.Outcome == contract.OutcomeFailed {
		t.Errorf("m2: %+v", it)
	}
	if got := scoresOf("m1"); len(got) != 0 {
		t.Errorf("m1's masked score was written: %v", got)
	}
	waitDecision("m2")

	// Unmask: the next update is written and the decision moves back.
	publish("[]\n")
	time.Sleep(100 * time.Millisecond) // a few mask-file checks
	r = send(map[string]float64{"m1": 96, "m2": 50, "m3": 10})
	if it := outcome(r, "m1"); it.Outcome != contract.OutcomeWritten || it.Reason != "" {
		t.Errorf("m1 unmasked: %+v, want Written", it)
	}
	if got := scoresOf("m1"); got[name] != 96 {
		t.Errorf("m1's scores %v, want free=96", got)
	}
	waitDecision("m1")
}

// startMaskedWriter is startWriter with the mask file, wired as functions/score-writer's main
// wires it: masks in the writer's options, and added masks enforced at once.
func startMaskedWriter(t *testing.T, maskPath string) *server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	client := fastClient(t)
	fn := function.New("score-writer", "test")
	mcs := scorewriter.WatchManagedClusters(ctx, client)
	for deadline := time.Now().Add(30 * time.Second); mcs.Ready() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("ManagedCluster informer did not sync")
		}
	}
	mf, err := masks.Open(maskPath, fn.Log, fn.Registry)
	if err != nil {
		t.Fatal(err)
	}
	var w *scorewriter.Writer
	metrics := scorewriter.NewMetrics(fn.Registry, func() float64 { return float64(w.Pending()) })
	opts := scorewriter.DefaultOptions()
	opts.Masks, opts.Clusters = mf, mcs
	if w, err = scorewriter.NewWriter(client, opts, metrics, fn.Log); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	enforce := func(es []masks.Entry) {
		keys := make([]scorewriter.Key, len(es))
		for i, e := range es {
			keys[i] = scorewriter.Key{Cluster: e.Cluster, Resource: e.Resource}
		}
		w.EnforceMasks(keys...)
	}
	enforce(mf.Set().Entries())
	go mf.Watch(ctx, 20*time.Millisecond, enforce)
	h := scorewriter.NewHandler(w, mcs, scorewriter.HandlerOptions{TTL: time.Hour, MaxClockSkew: 2 * time.Minute, Source: fn.Source()})
	srv := httptest.NewServer(fn.Handler(h.Handle, h.FailureReply))
	t.Cleanup(func() {
		srv.Close()
		cancel()
		<-done
	})
	return &server{url: srv.URL, fn: fn, writer: w}
}

// TestMasksAtStartCleanObjectsWrittenBefore: a writer that starts with a mask, and has never seen
// the object, reads it and removes the masked score; the other scores stay.
func TestMasksAtStartCleanObjectsWrittenBefore(t *testing.T) {
	plain := startWriter(t, serverOpts{})
	status, reply := plain.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "masked-at-start", Items: []contract.ClusterScores{item("c1", score("free", 5), score("other", 6))}}))
	if status != http.StatusOK {
		t.Fatalf("status %d reply %v", status, reply)
	}
	maskPath := filepath.Join(t.TempDir(), "masks.yaml")
	if err := os.WriteFile(maskPath, []byte("- {cluster: c1, resource: masked-at-start, score: free}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	startMaskedWriter(t, maskPath)
	var got map[string]int32
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		got = map[string]int32{}
		for _, s := range get(t, "c1", "masked-at-start").Status.Scores {
			got[s.Name] = s.Value
		}
		if reflect.DeepEqual(got, map[string]int32{"other": 6}) {
			return
		}
	}
	t.Fatalf("scores %v, want other=6 only", got)
}
