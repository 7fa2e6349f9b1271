package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/scoreflow/scoreflow/harness/devrun"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer/normalize"
)

// splitMaxItems is the promql-scorer's --max-items-per-event in this stack (runMain): more than
// the demo's three clusters, so only TestFleetResultLandsInParts splits.
const splitMaxItems = 40

// TestFleetResultLandsInParts: a metric.changed for 250 clusters makes the promql-scorer's result
// 7 score.updated events (--max-items-per-event 40): one its reply, six through its SinkBinding's
// K_SINK, all through the real broker. Each part carries the id the scorer derives from the input
// (part-<hash>-k-of-7), the writer writes each (write.done, none dead-lettered), and every
// cluster's score lands on the hub with its value.
func TestFleetResultLandsInParts(t *testing.T) {
	const clusters = 250
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	names := make([]string, clusters)
	values := map[string]float64{}
	for i := range names {
		names[i] = fmt.Sprintf("fleet-%03d", i)
		values[names[i]] = float64(i%101) / 100
	}
	// Registered, accepted clusters (the writer refuses others), outside the demo's cluster set.
	created := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, clusters)
	work := make(chan string)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				err := stack.Hub.AddCluster(ctx, c, nil)
				if err == nil {
					err = stack.Hub.AcceptCluster(ctx, c)
				}
				errs <- err
			}
		}()
	}
	for _, c := range names {
		work <- c
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d ManagedClusters created and accepted in %s", clusters, time.Since(created).Round(time.Millisecond))

	in := idle(t, values)
	sent := time.Now()
	if st := post(t, in); st != http.StatusAccepted {
		t.Fatalf("broker answered %d", st)
	}
	norm := normalize.Linear{Min: 0, Max: 1} // deploy/promql-scorer.yaml's METRIC_CONFIG
	want := map[string]int32{}
	for c, v := range values {
		want[c], _ = norm.Score(v)
	}
	api := stack.Hub.Cluster.ClusterV1alpha1()
	var missing []string
	landed := func() bool {
		missing = missing[:0]
		for _, c := range names {
			obj, err := api.AddOnPlacementScores(c).Get(ctx, devrun.DemoResource, metav1.GetOptions{})
			if err != nil || len(obj.Status.Scores) != 1 || obj.Status.Scores[0].Name != devrun.DemoScoreName || obj.Status.Scores[0].Value != want[c] {
				missing = append(missing, c)
			}
		}
		return len(missing) == 0
	}
	deadline := time.Now().Add(90 * time.Second)
	for !landed() {
		if time.Now().After(deadline) {
			t.Fatalf("after 90s, %d of %d clusters have no %s/%s of the value sent (first: %v)", len(missing), clusters, devrun.DemoResource, devrun.DemoScoreName, missing[:min(5, len(missing))])
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("every cluster's score landed on the hub %s after the metric.changed was accepted", time.Since(sent).Round(time.Millisecond))

	// The parts as the broker routed them: ids part-<hash of the input's source and id>-k-of-n,
	// k = 1..n, each within the cap, together every cluster once.
	sum := sha256.Sum256([]byte(in.Source() + "\x00" + in.ID()))
	prefix := "part-" + hex.EncodeToString(sum[:12]) + "-"
	n := (clusters + splitMaxItems - 1) / splitMaxItems
	var parts []event.Event
	eventually(t, 30*time.Second, "the broker did not route every part to cloudevents-player's Trigger", func() bool {
		parts = observed.find(func(e *event.Event) bool {
			return e.Type() == contract.TypeScoreUpdated && strings.HasPrefix(e.ID(), prefix)
		})
		return len(parts) >= n
	})
	seen := map[string]int{}
	ids := map[string]bool{}
	partItems := map[string][]contract.ClusterScores{}
	for _, p := range parts {
		ids[p.ID()] = true
		s, err := contract.DecodeScoreUpdated(&p)
		if err != nil {
			t.Fatalf("part %s: %v", p.ID(), err)
		}
		if len(s.Items) > splitMaxItems {
			t.Errorf("part %s has %d clusters, more than --max-items-per-event %d", p.ID(), len(s.Items), splitMaxItems)
		}
		if _, again := partItems[p.ID()]; again {
			continue // delivered twice (at least once): counted once
		}
		partItems[p.ID()] = s.Items
		for _, it := range s.Items {
			seen[it.Cluster]++
		}
	}
	var got []string
	for id := range ids {
		got = append(got, id)
	}
	sort.Strings(got)
	if len(ids) != n {
		t.Errorf("parts %v, want %d", got, n)
	}
	for k := 1; k <= n; k++ {
		if id := fmt.Sprintf("%s%d-of-%d", prefix, k, n); !ids[id] {
			t.Errorf("no part %s among %v", id, got)
		}
	}
	for _, c := range names {
		if seen[c] != 1 {
			t.Errorf("cluster %s is in %d parts, want 1", c, seen[c])
		}
	}
	// Each part written by the writer, and none given up on.
	for _, id := range got {
		eventually(t, 30*time.Second, "no write result for part "+id, func() bool { return len(observed.results(id)) > 0 })
		for _, r := range observed.results(id) {
			if r.Failed() { // a dead-lettered part is reported failed, with reason DeadLettered
				t.Errorf("part %s: %s %s %v", id, r.Reason, r.Message, r.Counts)
			} else if len(r.Items) != len(partItems[id]) {
				t.Errorf("part %s: write.done for %d clusters, the part had %d", id, len(r.Items), len(partItems[id]))
			}
		}
	}
}
