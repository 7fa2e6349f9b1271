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

// documentedNames is how many scores of 100-character names one producer's object holds
// (docs/score-writer.md; TestObjectBoundOnTheRealHub finds it).
const documentedNames = 2906

// A producer holding the documented number of names is never refused for what it already holds:
// its refreshes, whatever the width of their times (whole seconds, milliseconds, nanoseconds), the
// same values or new ones, are written or skipped, and one name more is refused. So is a producer
// whose object an earlier writer filled past that (its ledger's times trimmed of their zeros, one
// name more fitted): its refreshes are never refused for size either.
func TestRefreshAtTheBoundIsNeverRefused(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{})
	ctx := context.Background()
	api := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("c5")
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	validUntil := base.Add(time.Hour)
	send := func(resource string, observed time.Time, scores []contract.Score) (int, contract.ItemResult) {
		t.Helper()
		e := scoreEvent(t, observed, contract.ScoreUpdated{Resource: resource, ValidUntil: &validUntil, Items: []contract.ClusterScores{item("c5", scores...)}})
		e.SetSource("test/at-bound")
		status, reply := s.send(t, e)
		return status, result(t, reply).Items[0]
	}
	refreshes := func(t *testing.T, resource string, names int) {
		for i, step := range []struct {
			what     string
			observed time.Time
			value    float64
			want     contract.Outcome
		}{
			{"the same values, a nanosecond time", base.Add(time.Second + 123456789), 1, contract.OutcomeSkipped},
			{"new values, a nanosecond time", base.Add(2*time.Second + 987654321), 2, contract.OutcomeWritten},
			{"new values, a whole-second time", base.Add(3 * time.Second), 3, contract.OutcomeWritten},
			{"new values, a millisecond time", base.Add(4*time.Second + 5*time.Millisecond), -100, contract.OutcomeWritten},
		} {
			status, r := send(resource, step.observed, manyScores("node;ns;pod", names, 100, step.value))
			if status != http.StatusOK || r.Outcome != step.want {
				t.Fatalf("refresh %d, %s: %d %+v, want 200 %s", i, step.what, status, r, step.want)
			}
		}
		obj := get(t, "c5", resource)
		t.Logf("%d names of 100 characters: %d bytes of scores and ledger (the bound %d)", names, statusBytes(t, obj), contract.MaxObjectStatusBytes)
		status, r := send(resource, base.Add(5*time.Second), manyScores("node;ns;pod", names+1, 100, 5))
		if status != http.StatusUnprocessableEntity || r.Reason != contract.ReasonRejected {
			t.Errorf("one name more: %d %+v, want 422 Rejected", status, r)
		}
	}

	t.Run("the documented names", func(t *testing.T) {
		t.Cleanup(func() { _ = api.Delete(ctx, "at-bound", metav1.DeleteOptions{}) })
		if status, r := send("at-bound", base, manyScores("node;ns;pod", documentedNames, 100, 1)); status != http.StatusOK || r.Outcome != contract.OutcomeWritten {
			t.Fatalf("first write: %d %+v", status, r)
		}
		refreshes(t, "at-bound", documentedNames)
	})
	t.Run("an object an earlier writer filled", func(t *testing.T) {
		const names = 2907
		t.Cleanup(func() { _ = api.Delete(ctx, "earlier-bound", metav1.DeleteOptions{}) })
		obj, err := api.Create(ctx, &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: "earlier-bound", Namespace: "c5"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		scores := manyScores("node;ns;pod", names, 100, 1)
		var list []string
		for _, sc := range scores {
			obj.Status.Scores = append(obj.Status.Scores, clusterv1alpha1.AddOnPlacementScoreItem{Name: sc.Name, Value: 1})
			list = append(list, sc.Name)
		}
		vu := metav1.NewTime(validUntil)
		obj.Status.ValidUntil = &vu
		obj.Status.Conditions = earlierLedger("test/at-bound", base, validUntil, list)
		if obj, err = api.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Logf("as an earlier writer left it: %d bytes of scores and ledger", statusBytes(t, obj))
		time.Sleep(500 * time.Millisecond) // the writer's informer shows it
		refreshes(t, "earlier-bound", names)
	})
}

// earlierLedger is the ledger a writer before fixed-width times wrote for names of one producer
// observed at a whole second: each time without a fraction, the names packed into conditions of
// at most 32,768 characters.
func earlierLedger(source string, observed, validUntil time.Time, names []string) []metav1.Condition {
	var out []metav1.Condition
	for i := 0; len(names) > 0; i++ {
		n := min(len(names), 300)
		group, _ := json.Marshal(map[string]any{"source": source, "observed": observed.UTC(), "validUntil": validUntil.UTC(), "names": names[:n]})
		names = names[n:]
		typ := scorewriter.ConditionObservations
		if i > 0 {
			typ += fmt.Sprintf("-%d", i)
		}
		out = append(out, metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: "ObservationTimes", Message: `{"groups":[` + string(group) + `]}`,
			LastTransitionTime: metav1.NewTime(observed)})
	}
	return out
}
