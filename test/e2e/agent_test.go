package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonclient "open-cluster-management.io/api/client/addon/clientset/versioned"

	"github.com/scoreflow/scoreflow/harness/authtest"
	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/hubtoken"
)

// An agent of cluster2 (a token of its hub ServiceAccount, the latency addon installed as addon/
// ships it and enabled for cluster2) posts its latency score, the resource its AddOnTemplate's
// configuration names, to the agent gateway that `make run` runs; the gateway forwards it through
// the broker to the writer. Without a token, or for another cluster, it is refused and nothing is
// written.
func TestAgentThroughTheGateway(t *testing.T) {
	ctx := context.Background()
	const addon, resource = "scoreflow-latency-agent", "latency"
	installLatencyAddon(ctx, t)
	if _, err := addonclient.NewForConfigOrDie(stack.Hub.Config).AddonV1alpha1().ManagedClusterAddOns("cluster2").Create(ctx,
		&addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: addon, Namespace: "cluster2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := authtest.Token(t, stack.Hub.Kube, "cluster2", addon, hubtoken.Audience)
	gateway := stack.Functions["agent-gateway"].URL
	send := func(token, cluster string, value float64) int {
		e := cloudevents.NewEvent()
		e.SetID(uuid.NewString())
		e.SetSource("scoreflow/latency-scorer/cluster2")
		e.SetType(contract.TypeScoreUpdated)
		e.SetTime(time.Now())
		_ = e.SetData(cloudevents.ApplicationJSON, contract.ScoreUpdated{Resource: resource,
			Items: []contract.ClusterScores{{Cluster: cluster, Scores: []contract.Score{{Name: "registry", Value: value}}}}})
		req := functest.Request(t, gateway, e)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if st := send("", "cluster2", 10); st != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", st)
	}
	st := send(token, "cluster2", 61)
	// The gateway's informers see the new ManagedClusterAddOn and AddOnTemplate within moments.
	for deadline := time.Now().Add(10 * time.Second); st == http.StatusForbidden && time.Now().Before(deadline); st = send(token, "cluster2", 61) {
		time.Sleep(100 * time.Millisecond)
	}
	if st != http.StatusAccepted {
		t.Fatalf("cluster2's agent: %d, want 202", st)
	}
	score := func(cluster string) (int32, bool) {
		obj, err := stack.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(cluster).Get(ctx, resource, metav1.GetOptions{})
		if err != nil || len(obj.Status.Scores) == 0 {
			return 0, false
		}
		return obj.Status.Scores[0].Value, true
	}
	eventually(t, 30*time.Second, "cluster2's latency from its agent was not written", func() bool {
		v, ok := score("cluster2")
		return ok && v == 61
	})
	if st := send(token, "cluster3", 99); st != http.StatusForbidden {
		t.Errorf("cluster2's agent scoring cluster3: %d, want 403", st)
	}
	time.Sleep(2 * time.Second) // time for a refused score to land, had it been forwarded
	if v, ok := score("cluster3"); ok {
		t.Errorf("cluster2's agent wrote cluster3's latency: %d", v)
	}
}

// installLatencyAddon applies addon/ as it ships (what `ko apply -f addon/` sends).
func installLatencyAddon(ctx context.Context, t *testing.T) {
	t.Helper()
	shipped, err := knlocal.ReadFiles("../../addon")
	if err != nil {
		t.Fatal(err)
	}
	if err := stack.Knative.Applier.Apply(ctx, shipped...); err != nil {
		t.Fatal(err)
	}
}
