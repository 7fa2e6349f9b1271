package deploy

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/google/uuid"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/harness/proc"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

// gateway is the one Service of deploy/ that managed clusters reach from outside the hub.
const gateway = "agent-gateway"

// TestOnlyTheGatewayIsPublic: on a cluster whose Knative ingress is public, every Service of
// deploy/ is cluster-local (networking.knative.dev/visibility) except the agent gateway; and the
// public one is the gateway binary, which, started with its manifest's table against a hub,
// refuses an event without a token (401) and forwards nothing.
func TestOnlyTheGatewayIsPublic(t *testing.T) {
	var public []string
	for name, s := range allSets(t) {
		if name == setAgent {
			continue // deploy/managed-cluster/ runs on a managed cluster
		}
		for _, it := range s.Services {
			if it.Object.Labels["networking.knative.dev/visibility"] != "cluster-local" && !contains(public, it.Object.Name) {
				public = append(public, it.Object.Name)
			}
		}
	}
	sort.Strings(public)
	if len(public) != 1 || public[0] != gateway {
		t.Fatalf("public Services %v, want only %s", public, gateway)
	}
	s := load(t, setHub)
	it, ok := manifests.Find(s.Services, Namespace, gateway)
	if !ok {
		t.Fatalf("no Service %s", gateway)
	}
	if fn := functionName(it.Object.Spec.Template.Spec.Containers[0].Image); fn != gateway {
		t.Fatalf("the public Service runs %q, not the gateway", fn)
	}
	table, err := mountedFile(s, gateway, "AGENTS_FILE")
	if err != nil {
		t.Fatal(err)
	}

	h := rbacHub(t)
	seedGateway(t, h)
	dir := t.TempDir()
	bin := filepath.Join(dir, gateway)
	build := exec.Command("go", "build", "-o", bin, "./functions/"+gateway)
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	agents, kubeconfig := filepath.Join(dir, "agents.yaml"), filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(agents, table, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	port, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	broker := functest.NewSink(t, nil)
	p, err := proc.Start(proc.Spec{Name: gateway, Path: bin, Env: []string{"PATH=" + os.Getenv("PATH"), fmt.Sprintf("PORT=%d", port),
		"ADDRESS=127.0.0.1", "AGENTS_FILE=" + agents, "KUBECONFIG=" + kubeconfig, "K_SINK=" + broker.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(5 * time.Second)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(url + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the gateway was not ready within 30s")
		}
	}
	e := cloudevents.NewEvent()
	e.SetID(uuid.NewString())
	e.SetSource("anyone")
	e.SetType(contract.TypeScoreUpdated)
	_ = e.SetData(cloudevents.ApplicationJSON, contract.ScoreUpdated{Resource: "latency",
		Items: []contract.ClusterScores{{Cluster: cluster, Scores: []contract.Score{{Name: "s", Value: 100}}}}})
	if st, _ := functest.Send(t, url, e); st != http.StatusUnauthorized {
		t.Errorf("an event without a token: %d, want 401", st)
	}
	if n := broker.Attempts(); n != 0 {
		t.Errorf("%d events reached the broker", n)
	}
}
