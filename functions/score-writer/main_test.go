package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

func TestMain(m *testing.M) { functest.Main(m, main) }

func TestNoKnativeEventingImport(t *testing.T) {
	if functest.Imports(t, "knative.dev/eventing") {
		t.Error("the score-writer imports knative.dev/eventing")
	}
}

func TestHelp(t *testing.T) {
	functest.Help(t, "--kubeconfig  [env KUBECONFIG]", "--ttl  [env TTL]", "--coalesce-window  [env COALESCE_WINDOW]",
		"--retry-for  [env RETRY_FOR]", "--event-deadline  [env EVENT_DEADLINE]", "--max-conflicts", "--max-pending", "--workers", "--remember", "--kube-api-qps", "--port  [env PORT]")
}

func TestBadKubeconfigIsFatal(t *testing.T) {
	out, code := functest.Exec(t, nil, "--kubeconfig", filepath.Join(t.TempDir(), "missing"), "--port", "0")
	if code != 1 || !strings.Contains(out, "hub config") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}

// The binary as deployed: configured by env, ready once its ManagedCluster informer has synced,
// writing to a real hub, draining on SIGTERM.
func TestBinaryWritesToARealHub(t *testing.T) {
	_, fn := startOnHub(t)

	e := cloudevents.NewEvent()
	e.SetID("w1")
	e.SetSource("test")
	e.SetType(contract.TypeScoreUpdated)
	e.SetTime(time.Now())
	_ = e.SetData(cloudevents.ApplicationJSON, contract.ScoreUpdated{Resource: "binary", Items: []contract.ClusterScores{
		functest.ClusterScores("cluster1", "a", 12),
	}})
	status, reply := functest.Send(t, fn.URL, e)
	if status != http.StatusOK || reply == nil || reply.Type() != contract.TypeWriteDone {
		t.Fatalf("status %d reply %v\n%s", status, reply, fn.Output())
	}
	if code, body := functest.Get(t, fn.URL+"/metrics"); code != http.StatusOK || !strings.Contains(body, `scoreflow_score{cluster="cluster1",resource="binary",score="a"} 12`) {
		t.Errorf("/metrics: %d, lacks the score gauge", code)
	}
	fn.Stop(t, 30*time.Second)
}
