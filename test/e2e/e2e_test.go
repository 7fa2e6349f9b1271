package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/scoreflow/scoreflow/harness/devrun"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

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
// (the knativebrokerttl extension, 255 hops) runs out; then the reply is dropped and the loop stops.
func TestReplyLoopDiesAtTTL(t *testing.T) {
	e := cloudevents.NewEvent()
	e.SetID(uuid.NewString())
	e.SetSource("test/e2e")
	e.SetType(loopType)
	if st := post(t, e); st != http.StatusAccepted {
		t.Fatalf("broker answered %d", st)
	}
	eventually(t, 2*time.Minute, "the loop did not stop", func() bool {
		n := loops.count()
		time.Sleep(time.Second)
		return n > 0 && loops.count() == n
	})
	if n := loops.count(); n > 256 || n < 250 {
		t.Errorf("loop subscriber got %d deliveries: want about 255 (the TTL)", n)
	}
}

// A subscriber that keeps failing gets the broker's retries (brokers/scoreflow.yaml: retry 5,
// so 6 attempts), then the event goes to the dead-letter sink, the dead-letter function, whose
// write.failed (sent to its K_SINK, set by a SinkBinding) reaches cloudevents-player.
func TestFailingSubscriberIsRetriedThenDeadLettered(t *testing.T) {
	e := cloudevents.NewEvent()
	e.SetID(uuid.NewString())
	e.SetSource("test/e2e")
	e.SetType(refusedType)
	e.SetTime(time.Now())
	if st := post(t, e); st != http.StatusAccepted {
		t.Fatalf("broker answered %d", st)
	}
	eventually(t, 90*time.Second, "no write.failed for the undeliverable event", func() bool { return len(observed.results(e.ID())) > 0 })
	r := observed.results(e.ID())[0]
	if r.Reason != contract.ReasonDeadLettered || r.Input.Type != refusedType {
		t.Errorf("answer: %+v, want DeadLettered for the refused event", r)
	}
	if n := refusals.count(e.ID()); n != 6 {
		t.Errorf("%d attempts before dead-lettering, want 6 (1 + the broker's delivery.retry 5)", n)
	}
}

// A PingSource of deploy/ fires through mtping, the broker routes it to its scorer by the
// ceOverrides extension, and the scores land: the static-scorer's demo-performance-score.
func TestPingSourceScores(t *testing.T) {
	eventually(t, 90*time.Second, "no demo-performance-score from the static-scorer's PingSource", func() bool {
		obj, err := stack.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("cluster1").Get(context.Background(), "demo-performance-score", metav1.GetOptions{})
		return err == nil && len(obj.Status.Scores) > 0
	})
}

// The real ApiServerSource adapter, running as its own ServiceAccount, sends a new ManagedCluster
// to the health-scorer, whose score the writer puts on the hub.
func TestApiServerSourceScoresANewCluster(t *testing.T) {
	ctx := context.Background()
	if err := stack.Hub.AddCluster(ctx, "cluster9", nil); err != nil {
		t.Fatal(err)
	}
	if err := stack.Hub.MarkAvailable(ctx, "cluster9"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "no cluster-health score for the new cluster9", func() bool {
		obj, err := stack.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("cluster9").Get(ctx, "cluster-health", metav1.GetOptions{})
		return err == nil && len(obj.Status.Scores) > 0
	})
}

// Knative's own webhook validates what users apply: a Trigger with a broken filter is refused.
func TestWebhookRefusesABrokenTrigger(t *testing.T) {
	err := applyYAML(context.Background(), `
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: broken, namespace: scoreflow}
spec:
  broker: scoreflow
  filters: [{exact: {type: a}, prefix: {type: b}}]
  subscriber: {uri: "http://127.0.0.1:1"}
`)
	if err == nil || !strings.Contains(err.Error(), "admission webhook") {
		t.Fatalf("a Trigger with two dialects in one filter was admitted: %v", err)
	}
}

// The worst refusals scoreflow sends (every item of a fleet event refused) stay small enough for
// Knative's dispatcher, which panics base64-encoding a refusal body over 768 bytes: the broker
// dead-letters the event and keeps delivering.
func TestLargeRefusalIsDeadLetteredWithoutCrashingTheDispatcher(t *testing.T) {
	var items []string
	for i := 0; i < 2000; i++ {
		items = append(items, fmt.Sprintf(`{"cluster":"unknown-%04d","scores":[{"name":"s","value":1}]}`, i))
	}
	e := scoreUpdated(t, `{"resource":"fleet","items":[`+strings.Join(items, ",")+`]}`)
	if st := post(t, e); st != http.StatusAccepted {
		t.Fatalf("broker answered %d", st)
	}
	eventually(t, 60*time.Second, "no write.failed for the refused fleet event", func() bool { return len(observed.results(e.ID())) > 0 })
	if r := observed.results(e.ID())[0]; r.Reason != contract.ReasonDeadLettered {
		t.Errorf("answer to the refused fleet event: %+v, want DeadLettered", r)
	}
	if crashed := stack.Knative.Crashed(); len(crashed) > 0 {
		t.Fatalf("Knative crashed: %v", crashed)
	}
	// The dispatcher still routes: a metric change still moves a score.
	TestMetricChangeMovesThePlacement(t)
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

func scoreflow(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(filepath.Join(binDir, "scoreflow"), args...).CombinedOutput()
	return string(out), err
}

// `scoreflow send` posts like curl, and `scoreflow scores` shows what landed on the hub.
func TestCLISendAndScores(t *testing.T) {
	data := `{"resource":"manual","items":[{"cluster":"cluster1","scores":[{"name":"fromCli","value":42}]}]}`
	out, err := scoreflow(t, "send", "--broker", stack.BrokerURL, "--id", uuid.NewString(), "--data", data)
	if err != nil || !strings.Contains(out, "202 Accepted") {
		t.Fatalf("send: %v\n%s", err, out)
	}
	eventually(t, 30*time.Second, "the score sent with the CLI did not land", func() bool {
		out, err = scoreflow(t, "scores", "--kubeconfig", stack.Kubeconfig)
		return err == nil && strings.Contains(out, "manual/fromCli")
	})
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[0], "CLUSTER") || !strings.Contains(out, "placement scoreflow/most-idle-cpu decides: ") {
		t.Errorf("scores output:\n%s", out)
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "cluster1" && !strings.Contains(l, "42") {
			t.Errorf("cluster1's row lacks 42: %q", l)
		}
	}
	if out, err := scoreflow(t, "send", "--broker", stack.BrokerURL, "--data", "{not json"); err == nil || !strings.Contains(out, "not valid JSON") {
		t.Errorf("send with bad JSON: %v\n%s", err, out)
	}
}
