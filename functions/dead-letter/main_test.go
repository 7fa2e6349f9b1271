package main

import (
	"net/http"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

func TestMain(m *testing.M) { functest.Main(m, main) }

func TestNoKnativeEventingImport(t *testing.T) {
	if functest.Imports(t, "knative.dev/eventing") {
		t.Error("the dead-letter function imports knative.dev/eventing")
	}
}

func TestHelp(t *testing.T) {
	functest.Help(t, "--sink  [env SINK]", "--port  [env PORT]")
}

// The binary as deployed: configured by K_SINK, as a SinkBinding does, it reports a dead-lettered
// event to the broker and drains on SIGTERM.
func TestBinaryReportsToTheBroker(t *testing.T) {
	broker := functest.NewSink(t, nil)
	fn := functest.Start(t, []string{"K_SINK=" + broker.URL})
	e := cloudevents.NewEvent()
	e.SetID("orig-1")
	e.SetSource("scoreflow/static-scorer")
	e.SetType(contract.TypeScoreUpdated)
	_ = e.SetData(cloudevents.ApplicationJSON, []byte(`{"resource":"cpu-idle"}`))
	e.SetExtension("knativeerrorcode", "422")
	if code, _ := functest.Send(t, fn.URL, e); code != http.StatusAccepted {
		t.Fatalf("function answered %d, want 202", code)
	}
	got := broker.Take()
	if len(got) != 1 || got[0].Type() != contract.TypeWriteFailed {
		t.Fatalf("broker got %v, want one write.failed", got)
	}
	if r, err := contract.DecodeWriteResult(&got[0]); err != nil || r.Reason != contract.ReasonDeadLettered || r.Input.ID != "orig-1" {
		t.Errorf("report %+v (%v), want DeadLettered about orig-1", r, err)
	}
	fn.Stop(t, 30*time.Second)
}
