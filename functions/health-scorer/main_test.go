package main

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer/health"
)

func TestMain(m *testing.M) { functest.Main(m, main) }

func TestNoKnativeEventingImport(t *testing.T) {
	if functest.Imports(t, "knative.dev/eventing") {
		t.Error("this function imports knative.dev/eventing")
	}
}

func TestBinary(t *testing.T) {
	t.Run("help names every flag", func(t *testing.T) {
		functest.Help(t, "--resource", "--score-name", "--valid-for", "--kubeconfig")
	})

	t.Run("bad flags are fatal", func(t *testing.T) {
		out, code := functest.Exec(t, nil, "--resource", "Not_A_Name", "--port", "0")
		if code != 1 || !strings.Contains(out, "--resource") {
			t.Errorf("exit %d, output:\n%s", code, out)
		}
	})

	// The binary as deployed, against a real hub (etcd and kube-apiserver): a ping scores the
	// clusters that exist, though no ApiServerSource event ever named them, and a deleted
	// cluster is answered with nothing to score.
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	ctx := context.Background()
	if err := hub.AddCluster(ctx, "west", nil); err != nil {
		t.Fatal(err)
	}
	if err := hub.MarkAvailable(ctx, "west"); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := hub.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	fn := functest.Start(t, []string{"KUBECONFIG=" + kubeconfig}, "--resource", "dr-health")

	t.Run("a ping scores every cluster on the hub", func(t *testing.T) {
		// Until the informer has listed the hub a ping is answered 503, for the broker to retry.
		status, reply := functest.Send(t, fn.URL, functest.Ping(`{}`))
		for deadline := time.Now().Add(10 * time.Second); status == http.StatusServiceUnavailable && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			status, reply = functest.Send(t, fn.URL, functest.Ping(`{}`))
		}
		su, fail := functest.Reply(t, reply)
		if status != http.StatusOK || fail != nil {
			t.Fatalf("status %d failure %+v", status, fail)
		}
		if su.Resource != "dr-health" || len(su.Items) != 1 || su.Items[0].Cluster != "west" || su.Items[0].Scores[0].Value != health.HealthyScore {
			t.Errorf("reply %+v, want dr-health west %d", su, health.HealthyScore)
		}
		if su.ValidUntil == nil || !su.ValidUntil.Equal(reply.Time().Add(health.DefaultValidFor)) {
			t.Errorf("validUntil %v, want %s after the evaluation at %s", su.ValidUntil, health.DefaultValidFor, reply.Time())
		}
	})

	t.Run("a deleted cluster has nothing to score", func(t *testing.T) {
		e := cloudevents.NewEvent()
		e.SetID("d1")
		e.SetSource("https://10.96.0.1:443")
		e.SetType(health.TypeDelete)
		e.SetTime(time.Now())
		_ = e.SetData(cloudevents.ApplicationJSON, []byte(`{"apiVersion":"cluster.open-cluster-management.io/v1","kind":"ManagedCluster","metadata":{"name":"west"},"spec":{"hubAcceptsClient":true}}`))
		status, reply := functest.Send(t, fn.URL, e)
		if status != http.StatusAccepted || reply != nil {
			su, _ := contract.DecodeScoreUpdated(reply)
			t.Errorf("status %d reply %+v; want 202 and no event", status, su)
		}
		fn.WaitOutput(t, `"state":"Deleted"`, 5*time.Second) // a structured log of the state
	})
}
