package main

import (
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorers/health"
)

func TestMain(m *testing.M) { functest.Main(m, main) }

func TestNoKnativeEventingImport(t *testing.T) {
	if functest.Imports(t, "knative.dev/eventing") {
		t.Error("this function imports knative.dev/eventing")
	}
}

func TestBinary(t *testing.T) {
	t.Run("help names every flag", func(t *testing.T) {
		functest.Help(t, "--resource", "--score-name", "--valid-for")
	})

	t.Run("bad flags are fatal", func(t *testing.T) {
		out, code := functest.Exec(t, nil, "--resource", "Not_A_Name", "--port", "0")
		if code != 1 || !strings.Contains(out, "--resource") {
			t.Errorf("exit %d, output:\n%s", code, out)
		}
	})

	t.Run("scores a deleted cluster -100", func(t *testing.T) {
		fn := functest.Start(t, nil, "--resource", "dr-health")
		e := cloudevents.NewEvent()
		e.SetID("d1")
		e.SetSource("https://10.96.0.1:443")
		e.SetType(health.TypeDelete)
		e.SetTime(time.Now())
		_ = e.SetData(cloudevents.ApplicationJSON, []byte(`{"apiVersion":"cluster.open-cluster-management.io/v1","kind":"ManagedCluster","metadata":{"name":"west"},"spec":{"hubAcceptsClient":true}}`))
		status, reply := functest.Send(t, fn.URL, e)
		if reply == nil {
			t.Fatalf("no reply: status %d", status)
		}
		su, err := contract.DecodeScoreUpdated(reply)
		if err != nil || su.Resource != "dr-health" || su.Items[0].Cluster != "west" || su.Items[0].Scores[0].Value != -100 {
			t.Errorf("reply %+v, %v; want dr-health west -100", su, err)
		}
		fn.WaitOutput(t, `"state":"Deleted"`, 5*time.Second) // a structured log of the state
	})
}
