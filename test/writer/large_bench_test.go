package writer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// BenchmarkScoreWriterLargeObject measures what one AddOnPlacementScore of 2,000 scores of
// 100-character names costs (a DSF scorer over ${node};${namespace};${pod} on a cluster of 2,000
// pods): the POST of its score.updated to the writer's answer, for the first write (create and status), a
// refresh changing every value, and a refresh of the same values (Unchanged: a read, no write),
// against hub-raw, a plain client writing the same scores (no ledger) with UpdateStatus; and the
// bytes of what is written and of the object as the API server serves it.
//
//	go test ./test/writer -run '^$' -bench ScoreWriterLargeObject -benchtime 1x
func BenchmarkScoreWriterLargeObject(b *testing.B) {
	s := startWriter(b, serverOpts{})
	ctx := context.Background()
	api := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("c4")
	const n = 2000
	for i := range b.N {
		resource, raw := fmt.Sprintf("large-%d", i), fmt.Sprintf("large-raw-%d", i)
		b.Cleanup(func() {
			_ = api.Delete(ctx, resource, metav1.DeleteOptions{})
			_ = api.Delete(ctx, raw, metav1.DeleteOptions{})
		})
		observed := time.Now().Add(-time.Minute).Truncate(time.Second)
		send := func(what string, at time.Time, v float64, want contract.Outcome) time.Duration {
			b.Helper()
			e := scoreEvent(b, at, contract.ScoreUpdated{Resource: resource, Items: []contract.ClusterScores{item("c4", manyScores("node;ns;pod", n, 100, v)...)}})
			start := time.Now()
			status, reply := s.send(b, e)
			took := time.Since(start)
			if r := result(b, reply); status != http.StatusOK || r.Items[0].Outcome != want {
				b.Fatalf("%s: %d %+v, want %s", what, status, r.Items[0], want)
			}
			return took
		}
		first := send("first", observed, 1, contract.OutcomeWritten)
		changed := send("changed", observed.Add(time.Second), 2, contract.OutcomeWritten)
		same := send("unchanged", observed.Add(2*time.Second), 2, contract.OutcomeSkipped)

		obj, err := api.Get(ctx, resource, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		whole, _ := json.Marshal(obj)
		scores, _ := json.Marshal(obj.Status.Scores)

		// hub-raw: the same scores, created then written with one UpdateStatus each time.
		rawObj, err := api.Create(ctx, &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: raw, Namespace: "c4"}}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		var rawTook []time.Duration
		for _, v := range []int32{1, 2} {
			rawObj.Status.Scores = make([]clusterv1alpha1.AddOnPlacementScoreItem, n)
			for j, sc := range manyScores("node;ns;pod", n, 100, float64(v)) {
				rawObj.Status.Scores[j] = clusterv1alpha1.AddOnPlacementScoreItem{Name: sc.Name, Value: v}
			}
			vu := metav1.NewTime(observed.Add(time.Hour))
			rawObj.Status.ValidUntil = &vu
			start := time.Now()
			if rawObj, err = api.UpdateStatus(ctx, rawObj, metav1.UpdateOptions{}); err != nil {
				b.Fatal(err)
			}
			rawTook = append(rawTook, time.Since(start))
		}
		b.ReportMetric(ms(first), "first-ms")
		b.ReportMetric(ms(changed), "changed-ms")
		b.ReportMetric(ms(same), "unchanged-ms")
		b.ReportMetric(ms(rawTook[1]), "hub-raw-changed-ms")
		b.ReportMetric(float64(statusBytes(b, obj)), "status-bytes")
		b.ReportMetric(float64(len(scores)), "scores-bytes")
		b.ReportMetric(float64(len(whole)), "object-bytes")
		b.Logf("2,000 scores: first write %s, changed %s, unchanged %s (hub-raw: first status %s, changed %s); scores %d bytes, scores and ledger %d, object as served %d (load %.1f)",
			first.Round(time.Millisecond), changed.Round(time.Millisecond), same.Round(time.Millisecond),
			rawTook[0].Round(time.Millisecond), rawTook[1].Round(time.Millisecond), len(scores), statusBytes(b, obj), len(whole), loadAverage())
	}
}
