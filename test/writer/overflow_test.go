package writer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

// sendTogether sends events at once and returns their answers in order. Sent right after a write
// of their object to a writer with a long coalescing window, they arrive while the object rests
// and share its next write (mergedWrites tells).
func sendTogether(t *testing.T, s *server, events ...cloudevents.Event) ([]int, []*contract.WriteResult) {
	t.Helper()
	statuses := make([]int, len(events))
	results := make([]*contract.WriteResult, len(events))
	var wg sync.WaitGroup
	for i, e := range events {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, reply := s.send(t, e)
			statuses[i] = status
			if reply != nil {
				r, err := contract.DecodeWriteResult(reply)
				if err == nil {
					results[i] = r
				}
			}
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r == nil {
			t.Fatalf("event %d: %d without a write result", i, statuses[i])
		}
	}
	return statuses, results
}

// mergedWrites counts the writes that carried more than one update
// (scoreflow_writer_updates_per_write above its first bucket, 1).
func (s *server) mergedWrites(t *testing.T) uint64 {
	t.Helper()
	mfs, err := s.fn.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "scoreflow_writer_updates_per_write" {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount() - h.GetBucket()[0].GetCumulativeCount()
		}
	}
	return 0
}

// A sender chooses its CloudEvents source; the writer names the sources of a write in a condition
// message, which the hub caps at 32 KiB. An honest update written together with an event whose
// source is 33 KB must still be written.
func TestHostileSourceDoesNotFailCoalescedUpdates(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{writer: scorewriter.Options{Window: 300 * time.Millisecond}})
	now := time.Now()
	honest := scoreEvent(t, now, contract.ScoreUpdated{Resource: "long-source", Items: []contract.ClusterScores{item("c4", score("honest", 5))}})
	hostile := scoreEvent(t, now, contract.ScoreUpdated{Resource: "long-source", Items: []contract.ClusterScores{item("c4", score("hostile", 6))}})
	hostile.SetSource("hostile/" + strings.Repeat("x", 33*1024))

	statuses, results := sendTogether(t, s, honest, hostile)
	if statuses[0] != http.StatusOK || results[0].Items[0].Outcome != contract.OutcomeWritten {
		t.Errorf("honest update: %d %+v, want 200 Written", statuses[0], results[0].Items[0])
	}
	obj := get(t, "c4", "long-source")
	if got := scoresOf(obj); got["honest"] != 5 {
		t.Errorf("scores on the hub = %v, want honest=5", got)
	}
	if c := meta.FindStatusCondition(obj.Status.Conditions, scorewriter.ConditionUpdated); c == nil || len(c.Message) > 1024 {
		t.Errorf("%s condition: %v, want a message under 1 KiB", scorewriter.ConditionUpdated, c)
	}
}

// manyScores are n scores of names length characters long, all of value v.
func manyScores(prefix string, n, length int, v float64) []contract.Score {
	out := make([]contract.Score, n)
	for i := range out {
		name := fmt.Sprintf("%s-%05d-", prefix, i)
		out[i] = score(name+strings.Repeat("p", length-len(name)), v)
	}
	return out
}

// statusBytes is what contract.MaxObjectStatusBytes bounds: an object's scores and the writer's
// ledger conditions, as written.
func statusBytes(t testing.TB, obj *clusterv1alpha1.AddOnPlacementScore) int {
	t.Helper()
	b, err := json.Marshal(obj.Status.Scores)
	if err != nil {
		t.Fatal(err)
	}
	n := len(b)
	for _, c := range obj.Status.Conditions {
		if strings.HasPrefix(c.Type, scorewriter.ConditionObservations) {
			n += len(c.Message)
		}
	}
	return n
}

// One AddOnPlacementScore holds a DSF scorer's scores over ${node};${namespace};${pod} on a
// cluster of 2,000 pods (100-character names), from one producer or several, on the real hub.
// The largest object the writer's bound lets through (found name by name) is stored by the API
// server and etcd, for 100- and 253-character names; one name more is refused alone (Failed,
// Rejected, not retriable) and changes nothing.
func TestObjectBoundOnTheRealHub(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{})
	ctx := context.Background()
	api := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("c4")
	send := func(resource, source string, observed time.Time, scores []contract.Score) (int, contract.ItemResult) {
		t.Helper()
		e := scoreEvent(t, observed, contract.ScoreUpdated{Resource: resource, Items: []contract.ClusterScores{item("c4", scores...)}})
		e.SetSource(source)
		status, reply := s.send(t, e)
		return status, result(t, reply).Items[0]
	}
	observed := time.Now().Add(-time.Minute).Truncate(time.Second)

	t.Run("2,000 scores, one producer", func(t *testing.T) {
		t.Cleanup(func() { _ = api.Delete(ctx, "dsf-pods", metav1.DeleteOptions{}) })
		start := time.Now()
		if status, r := send("dsf-pods", "test/dsf", observed, manyScores("node;ns;pod", 2000, 100, 1)); status != http.StatusOK || r.Outcome != contract.OutcomeWritten {
			t.Fatalf("%d %+v", status, r)
		}
		took := time.Since(start)
		obj := get(t, "c4", "dsf-pods")
		if len(obj.Status.Scores) != 2000 {
			t.Fatalf("%d scores on the hub", len(obj.Status.Scores))
		}
		t.Logf("2,000 scores of 100 characters written (create + status) in %s: %d bytes of scores and ledger", took.Round(time.Millisecond), statusBytes(t, obj))
	})

	t.Run("2,000 scores, four producers", func(t *testing.T) {
		t.Cleanup(func() { _ = api.Delete(ctx, "dsf-shared", metav1.DeleteOptions{}) })
		for p := range 4 {
			if status, r := send("dsf-shared", fmt.Sprintf("test/dsf-%d", p), observed.Add(time.Duration(p)*time.Second), manyScores(fmt.Sprintf("p%d;ns;pod", p), 500, 100, 1)); status != http.StatusOK || r.Outcome != contract.OutcomeWritten {
				t.Fatalf("producer %d: %d %+v", p, status, r)
			}
		}
		if n := len(get(t, "c4", "dsf-shared").Status.Scores); n != 2000 {
			t.Fatalf("%d scores on the hub, want 2000", n)
		}
	})

	for _, length := range []int{100, 253} {
		t.Run(fmt.Sprintf("at the bound, %d-character names", length), func(t *testing.T) {
			// Binary search for the most names that fit, each try a fresh object.
			tries := 0
			try := func(n int) bool {
				tries++
				resource := fmt.Sprintf("bound-%d-%d", length, tries)
				t.Cleanup(func() { _ = api.Delete(ctx, resource, metav1.DeleteOptions{}) })
				status, r := send(resource, "test/bound", observed, manyScores("s", n, length, 1))
				switch {
				case status == http.StatusOK && r.Outcome == contract.OutcomeWritten:
					return true
				case status == http.StatusUnprocessableEntity && r.Outcome == contract.OutcomeFailed && r.Reason == contract.ReasonRejected && !r.Retriable:
					if get(t, "c4", resource) != nil && len(get(t, "c4", resource).Status.Scores) > 0 {
						t.Errorf("%d names refused, yet written", n)
					}
					return false
				}
				t.Fatalf("%d names: %d %+v, want Written or Failed/Rejected", n, status, r)
				return false
			}
			lo, hi := contract.MaxObjectStatusBytes/(3*length), contract.MaxObjectStatusBytes/(2*length)
			if !try(lo) || try(hi) {
				t.Fatalf("%d names must fit and %d must not", lo, hi)
			}
			for hi-lo > 1 {
				if mid := (lo + hi) / 2; try(mid) {
					lo = mid
				} else {
					hi = mid
				}
			}
			resource := fmt.Sprintf("bound-%d-at", length)
			t.Cleanup(func() { _ = api.Delete(ctx, resource, metav1.DeleteOptions{}) })
			if status, r := send(resource, "test/bound", observed, manyScores("s", lo, length, 1)); status != http.StatusOK || r.Outcome != contract.OutcomeWritten {
				t.Fatalf("at the bound, %d names: %d %+v", lo, status, r)
			}
			// One more name on the full object: refused, the object unchanged.
			before := get(t, "c4", resource)
			status, r := send(resource, "test/bound", observed.Add(time.Second), manyScores("s", lo+1, length, 1))
			if status != http.StatusUnprocessableEntity || r.Outcome != contract.OutcomeFailed || r.Reason != contract.ReasonRejected || !strings.Contains(r.Message, "over the") {
				t.Errorf("one name past the bound: %d %+v, want 422 Failed/Rejected saying so", status, r)
			}
			if after := get(t, "c4", resource); after.ResourceVersion != before.ResourceVersion {
				t.Error("the refused update changed the object")
			}
			stored, err := api.Get(ctx, resource, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			whole, _ := json.Marshal(stored)
			t.Logf("%d-character names: the bound holds %d (%d bytes of scores and ledger; the object as the API server serves it, managedFields included, %d bytes, etcd's limit 1,572,864)",
				length, lo, statusBytes(t, before), len(whole))
		})
	}
}
