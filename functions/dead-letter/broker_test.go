package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	eventingv1 "knative.dev/eventing/pkg/apis/eventing/v1"
	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/harness/broker"
	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

// The path the manifests set up, on the local broker: the writer is down, its deliveries run
// out of retries, the dead-letter function reports them, and the report reaches whoever
// listens for write.failed. (The test links Knative through harness/broker; the function does not.)
const deadLetterPath = `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: scoreflow, namespace: scoreflow}
spec:
  delivery:
    retry: 2
    backoffPolicy: exponential
    backoffDelay: PT0.1S
    deadLetterSink: {ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: dead-letter}}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: score-writer, namespace: scoreflow}
spec:
  broker: scoreflow
  filters: [{exact: {type: io.scoreflow.score.updated}}]
  subscriber: {ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: score-writer}}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: cloudevents-player, namespace: scoreflow}
spec:
  broker: scoreflow
  filters: [{exact: {type: io.scoreflow.score.write.failed}}]
  subscriber: {ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: cloudevents-player}}
  delivery: {retry: 1}
`

func TestDeadLetterThroughLocalBroker(t *testing.T) {
	var brokers []*eventingv1.Broker
	var triggers []*eventingv1.Trigger
	for _, doc := range strings.Split(deadLetterPath, "\n---\n") {
		if strings.Contains(doc, "kind: Broker\n") {
			b := &eventingv1.Broker{}
			if err := yaml.UnmarshalStrict([]byte(doc), b); err != nil {
				t.Fatal(err)
			}
			brokers = append(brokers, b)
			continue
		}
		tr := &eventingv1.Trigger{}
		if err := yaml.UnmarshalStrict([]byte(doc), tr); err != nil {
			t.Fatal(err)
		}
		triggers = append(triggers, tr)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ingress := "http://" + ln.Addr().String() + "/scoreflow/scoreflow"
	writer := functest.NewSink(t, nil)
	writer.Answer(http.StatusServiceUnavailable)
	player := functest.NewSink(t, nil)
	deadLetter := startFunction(t, ingress) // K_SINK: the broker
	srv, err := broker.New(broker.Config{Brokers: brokers, Triggers: triggers, Resolver: broker.Services{
		"scoreflow/score-writer":       writer.URL,
		"scoreflow/cloudevents-player": player.URL,
		"scoreflow/dead-letter":        deadLetter,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ln); err != nil {
		t.Fatal(err)
	}
	in := deadLettered(contract.TypeScoreUpdated, `{"resource":"cpu-idle","items":[{"cluster":"c1","scores":[{"name":"cpuIdle","value":40}]}]}`, nil)
	if code, _ := functest.Send(t, ingress, in); code != http.StatusAccepted {
		t.Fatalf("broker answered %d", code)
	}
	select {
	case <-player.Arrived():
	case <-time.After(10 * time.Second):
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	if n := writer.Attempts(); n != 3 {
		t.Errorf("writer got %d attempts, want 3", n)
	}
	got := player.Take()
	if len(got) != 1 {
		t.Fatalf("player got %d events, want one write.failed", len(got))
	}
	r, err := contract.DecodeWriteResult(&got[0])
	if err != nil {
		t.Fatal(err)
	}
	if r.Input.ID != in.ID() || r.Input.Source != in.Source() || r.Resource != "cpu-idle" || r.Reason != contract.ReasonDeadLettered {
		t.Errorf("report %+v, want one naming the score.updated for cpu-idle", r)
	}
	if want := "delivery to " + writer.URL + " failed with HTTP 503"; !strings.HasPrefix(r.Message, want) {
		t.Errorf("message %q, want it to start with %q", r.Message, want)
	}
}
