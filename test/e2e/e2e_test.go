package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/scoreflow/scoreflow/harness/broker"
	"github.com/scoreflow/scoreflow/harness/devrun"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Tests run in this order: the last one stops a function.

// A metric change that makes another cluster the most idle moves the Placement's decision there:
// broker -> promql-scorer (METRIC_CONFIG) -> score.updated -> broker -> score-writer -> hub ->
// placement controller.
func TestMetricChangeMovesThePlacement(t *testing.T) {
	if st := post(t, idle(t, map[string]float64{"cluster1": 0.9, "cluster2": 0.2, "cluster3": 0.1})); st != http.StatusAccepted {
		t.Fatalf("broker answered %d", st)
	}
	eventually(t, 30*time.Second, "placement did not choose cluster1", func() bool { return decision(t) == "cluster1" })

	start := time.Now()
	e := idle(t, map[string]float64{"cluster1": 0.1, "cluster2": 0.95, "cluster3": 0.2})
	post(t, e)
	eventually(t, 30*time.Second, "placement did not move to cluster2", func() bool { return decision(t) == "cluster2" })
	t.Logf("decision moved to cluster2 %s after the metric change was accepted", time.Since(start).Round(time.Millisecond))

	obj, err := stack.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("cluster2").Get(context.Background(), devrun.DemoResource, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := obj.Status.Scores[0].Value; obj.Status.Scores[0].Name != devrun.DemoScoreName || v != 90 {
		// linear 0..1 -> -100..100: 0.95 -> 90
		t.Errorf("cluster2 %s = %+v, want %s 90", devrun.DemoResource, obj.Status.Scores, devrun.DemoScoreName)
	}
}

// Malformed input moves nothing and is answered by a write.failed with a reason.
func TestMalformedEventsMoveNothing(t *testing.T) {
	before := decision(t)
	api := stack.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("cluster3")
	obj, err := api.Get(context.Background(), devrun.DemoResource, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv := obj.ResourceVersion

	// Out of range: refused by the writer (200 with write.failed, routed by the broker).
	outOfRange := scoreUpdated(t, `{"resource":"cpu-idle","items":[{"cluster":"cluster3","scores":[{"name":"cpuIdle","value":150}]}]}`)
	// Not JSON: the writer answers 400, the broker dead-letters it, dead-letter sends write.failed.
	broken := scoreUpdated(t, `{"resource":"cpu-idle","items":[{"cluster":"cluster3",`)
	for _, e := range []cloudevents.Event{outOfRange, broken} {
		if st := post(t, e); st != http.StatusAccepted {
			t.Fatalf("broker answered %d", st)
		}
	}
	// Both were refused with 4xx, so the broker dead-lettered them; the dead-letter function's
	// write.failed carries the writer's own reasons.
	for id, reason := range map[string]contract.Reason{outOfRange.ID(): contract.ReasonOutOfRange, broken.ID(): contract.ReasonInvalidData} {
		eventually(t, 30*time.Second, "no write.failed for "+id, func() bool { return len(observed.results(id)) > 0 })
		r := observed.results(id)[0]
		if r.Reason != contract.ReasonDeadLettered || !strings.Contains(r.Message, "refused: "+string(reason)) {
			t.Errorf("answer to %s: %+v, want write.failed DeadLettered naming %s", id, r, reason)
		}
	}
	if r := observed.results(outOfRange.ID())[0]; len(r.Items) != 1 || r.Items[0].Reason != contract.ReasonOutOfRange || r.Items[0].Cluster != "cluster3" {
		t.Errorf("items of the out-of-range answer: %+v, want cluster3 OutOfRange", r.Items)
	}
	time.Sleep(time.Second) // give a wrong write time to land
	if obj, _ := api.Get(context.Background(), devrun.DemoResource, metav1.GetOptions{}); obj.ResourceVersion != rv {
		t.Errorf("cluster3's scores changed: %v", obj.Status.Scores)
	}
	if after := decision(t); after != before {
		t.Errorf("decision moved from %s to %s", before, after)
	}
}

// A Trigger whose subscriber answers with an event it matches again loops until the broker's TTL
// runs out; the last reply is refused and its cause dead-lettered into one write.failed.
func TestReplyLoopDiesAtTTL(t *testing.T) {
	e := cloudevents.NewEvent()
	e.SetID(uuid.NewString())
	e.SetSource("test/e2e")
	e.SetType(loopType)
	if st := post(t, e); st != http.StatusAccepted {
		t.Fatalf("broker answered %d", st)
	}
	eventually(t, 60*time.Second, "the loop did not die", func() bool {
		return len(records.find(func(r broker.Record) bool { return r.Kind == broker.KindDeadLettered && r.Type == loopType })) > 0
	})
	n := loops.count()
	time.Sleep(500 * time.Millisecond)
	if again := loops.count(); again != n || n > 255 || n < 250 {
		t.Errorf("loop subscriber got %d deliveries, then %d: want about 255 (the TTL), then none", n, again)
	}
	eventually(t, 30*time.Second, "no write.failed for the dead loop", func() bool {
		return len(records.find(func(r broker.Record) bool {
			return r.Kind == broker.KindAccepted && r.Type == contract.TypeWriteFailed && r.Source == "scoreflow/dead-letter"
		})) > 0
	})
}

// A subscriber that is down gets its retries, then the event is dead-lettered into write.failed.
// This test stops the promql-scorer: it runs last.
func TestDownSubscriberIsRetriedThenDeadLettered(t *testing.T) {
	stack.Functions["promql-scorer"].Stop()
	e := idle(t, map[string]float64{"cluster1": 0.5})
	if st := post(t, e); st != http.StatusAccepted {
		t.Fatalf("broker answered %d", st)
	}
	eventually(t, 60*time.Second, "no write.failed for the undeliverable event", func() bool { return len(observed.results(e.ID())) > 0 })
	r := observed.results(e.ID())[0]
	if r.Reason != contract.ReasonDeadLettered || r.Input.Type != contract.TypeMetricChanged {
		t.Errorf("answer: %+v, want DeadLettered for the metric.changed", r)
	}
	retries := records.find(func(rec broker.Record) bool {
		return rec.Kind == broker.KindRetry && rec.ID == e.ID() && rec.Trigger == devrun.Namespace+"/promql-scorer"
	})
	if len(retries) != 5 { // brokers/scoreflow.yaml: retry 5
		t.Errorf("%d retries before dead-lettering, want 5 (the broker's delivery.retry)", len(retries))
	}
}

func scoreUpdated(t testing.TB, data string) cloudevents.Event {
	t.Helper()
	e := cloudevents.NewEvent()
	e.SetID(uuid.NewString())
	e.SetSource("test/e2e")
	e.SetType(contract.TypeScoreUpdated)
	e.SetTime(time.Now())
	if err := e.SetData(cloudevents.ApplicationJSON, []byte(data)); err != nil {
		t.Fatal(err)
	}
	return e
}
