package e2e

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/scoreflow/scoreflow/harness/devrun"
	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

// pythonSource is the CloudEvents source the example scorer names itself by.
const pythonSource = "scoreflow-examples/python-scorer"

// TestPythonExampleScorer: the custom scorer of examples/python-scorer (Python's standard library,
// no scoreflow code) runs as a process behind its own Service, Trigger and PingSource, applied
// from the example's YAML through Knative's webhook. A ping through the broker gets its scores onto the hub
// through the score-writer; a value the writer refuses comes back as write.failed naming the
// cluster and OutOfRange; a bad configuration, refused 400 by the scorer, comes back through the
// dead-letter sink as write.failed carrying the scorer's own reason. Its score.updated carry the
// scoreflowresource extension.
func TestPythonExampleScorer(t *testing.T) {
	ctx := context.Background()
	scorerURL := functest.Python(t, []string{"PORT=0", "ADDRESS=127.0.0.1"}, filepath.Join("..", "..", "examples", "python-scorer", "scorer.py"))

	// The example's YAML as a user applies it, admitted by Knative's webhook. Its PingSource fires
	// every minute with costs that give cluster1 and cluster2 the scores checked below; it is
	// deleted at the end so that it does not ping the tests that follow.
	objs, err := knlocal.ReadFiles(filepath.Join("..", "..", "examples", "python-scorer", "scorer.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()] = true
	}
	if len(objs) != 3 || !kinds["Service"] || !kinds["Trigger"] || !kinds["PingSource"] {
		t.Fatalf("examples/python-scorer/scorer.yaml: want a Service, a Trigger and a PingSource, got %v", kinds)
	}
	if err := stack.Knative.Applier.Apply(ctx, objs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ri, err := stack.Knative.Applier.Resource(knlocal.PingSourceKind, devrun.Namespace); err == nil {
			_ = ri.Delete(context.Background(), "python-scorer-cost", metav1.DeleteOptions{})
		}
	})
	if err := stack.Knative.ServeService(ctx, devrun.Namespace, "python-scorer", scorerURL); err != nil {
		t.Fatal(err)
	}
	if err := stack.Knative.WaitReady(ctx, devrun.Namespace, time.Minute, knlocal.TriggerKind, knlocal.PingSourceKind); err != nil {
		t.Fatal(err)
	}

	// Scores land.
	if st := post(t, pythonPing(t, `{"resource": "cost", "costs": {"cluster1": 20, "cluster2": 70}}`)); st != http.StatusAccepted {
		t.Fatalf("broker answered %d", st)
	}
	want := map[string]int32{"cluster1": 80, "cluster2": 30}
	eventually(t, 30*time.Second, "the python scorer's scores did not reach the hub", func() bool {
		for c, v := range want {
			obj, err := stack.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(c).Get(ctx, "cost", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(obj.Status.Scores) != 1 || obj.Status.Scores[0].Name != "cheap" || obj.Status.Scores[0].Value != v {
				return false
			}
		}
		return true
	})

	// Like every scoreflow scorer, it names the resource in the scoreflowresource extension too.
	scores := func() []event.Event {
		return observed.find(func(e *event.Event) bool { return e.Source() == pythonSource && e.Type() == contract.TypeScoreUpdated })
	}
	eventually(t, 30*time.Second, "the player saw no score.updated of the python scorer", func() bool { return len(scores()) > 0 })
	for _, e := range scores() {
		if got := e.Extensions()[contract.ExtResource]; got != "cost" {
			t.Errorf("the python scorer's score.updated %s carries scoreflowresource %v, want cost", e.ID(), got)
		}
	}

	// A value out of range is refused, per cluster, as write.failed on the broker.
	if st := post(t, pythonPing(t, `{"resource": "cost", "costs": {"cluster3": 300}}`)); st != http.StatusAccepted {
		t.Fatalf("broker answered %d", st)
	}
	eventually(t, 30*time.Second, "no write.failed refusing cluster3's value", func() bool {
		for _, r := range writeFailed(func(r *contract.WriteResult) bool { return r.Input.Source == pythonSource }) {
			for _, it := range r.Items {
				if it.Cluster == "cluster3" && it.Reason == contract.ReasonOutOfRange {
					return true
				}
			}
		}
		return false
	})

	// The scorer refuses a bad configuration (400 with its score.failed): dead-lettered, reported.
	bad := pythonPing(t, `{"resource": "cost"}`)
	if st := post(t, bad); st != http.StatusAccepted {
		t.Fatalf("broker answered %d", st)
	}
	eventually(t, 60*time.Second, "no write.failed for the ping the scorer refused", func() bool {
		for _, r := range observed.results(bad.ID()) {
			if r.Reason == contract.ReasonDeadLettered && strings.Contains(r.Message, "BadConfig") {
				return true
			}
		}
		return false
	})
}

// pythonPing is the event the example's PingSource sends, with data as its configuration.
func pythonPing(t *testing.T, data string) event.Event {
	t.Helper()
	e := cloudevents.NewEvent()
	e.SetID(uuid.NewString())
	e.SetType(contract.TypePing)
	e.SetSource("/apis/v1/namespaces/" + devrun.Namespace + "/pingsources/python-scorer-cost")
	e.SetTime(time.Now())
	e.SetExtension("scorer", "python-scorer")
	if err := e.SetData(cloudevents.ApplicationJSON, []byte(data)); err != nil {
		t.Fatal(err)
	}
	return e
}

// writeFailed returns the write.failed events the broker routed that match.
func writeFailed(match func(*contract.WriteResult) bool) []*contract.WriteResult {
	var out []*contract.WriteResult
	for _, e := range observed.find(func(e *event.Event) bool { return e.Type() == contract.TypeWriteFailed }) {
		if r, err := contract.DecodeWriteResult(&e); err == nil && match(r) {
			out = append(out, r)
		}
	}
	return out
}
