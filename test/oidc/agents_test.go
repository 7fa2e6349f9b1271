package oidc

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonclient "open-cluster-management.io/api/client/addon/clientset/versioned"

	"github.com/scoreflow/scoreflow/harness/authtest"
	"github.com/scoreflow/scoreflow/harness/devrun"
	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/hubtoken"
)

// checkAgentThroughGateway: with sender identity on, an agent of cluster1 (a token of its hub
// ServiceAccount, the latency addon installed as addon/ ships it, whose AddOnTemplate's
// configuration is what the gateway admits, and enabled for cluster1) posts its latency score to the agent
// gateway, which forwards it with its SinkBinding's token; the Broker's EventPolicy for the
// gateway admits it and the writer writes it. The same agent's score of cluster2 is refused by the
// gateway and writes nothing.
func checkAgentThroughGateway(t *testing.T, ctx context.Context, s *devrun.Stack) {
	t.Helper()
	const addon = "scoreflow-latency-agent"
	shipped, err := knlocal.ReadFiles(filepath.Join(repo, "addon"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Knative.Applier.Apply(ctx, shipped...); err != nil {
		t.Fatal(err)
	}
	if _, err := addonclient.NewForConfigOrDie(s.Hub.Config).AddonV1alpha1().ManagedClusterAddOns("cluster1").Create(ctx,
		&addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: addon, Namespace: "cluster1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := authtest.Token(t, s.Hub.Kube, "cluster1", addon, hubtoken.Audience)
	post := func(cluster string, value float64) int {
		return postEvent(t, s.Functions["agent-gateway"].URL, token, scoreEvent(t, "scoreflow/latency-scorer/cluster1", contract.ScoreUpdated{Resource: "latency",
			Items: []contract.ClusterScores{{Cluster: cluster, Scores: []contract.Score{{Name: "registry", Value: value}}}}}))
	}
	// The gateway's informers see the new ManagedClusterAddOn and AddOnTemplate within moments.
	st := post("cluster1", 77)
	for deadline := time.Now().Add(10 * time.Second); st == http.StatusForbidden && time.Now().Before(deadline); st = post("cluster1", 77) {
		time.Sleep(100 * time.Millisecond)
	}
	if st != http.StatusAccepted {
		t.Fatalf("cluster1's agent through the gateway: %d, want 202", st)
	}
	written := func(cluster string) (float64, bool) {
		aps, err := s.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(cluster).Get(ctx, "latency", metav1.GetOptions{})
		if err != nil || len(aps.Status.Scores) == 0 {
			return 0, false
		}
		return float64(aps.Status.Scores[0].Value), true
	}
	eventually(t, 60*time.Second, "cluster1's latency score from its agent was not written", func() bool {
		v, ok := written("cluster1")
		return ok && v == 77
	})
	if st := post("cluster2", 99); st != http.StatusForbidden {
		t.Errorf("cluster1's agent scoring cluster2 through the gateway: %d, want 403", st)
	}
	time.Sleep(2 * time.Second) // time for a refused score to land, had it been forwarded
	if v, ok := written("cluster2"); ok {
		t.Errorf("cluster1's agent wrote cluster2's latency: %v", v)
	}
}
