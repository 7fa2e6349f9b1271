package oidc

import (
	"context"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/scoreflow/scoreflow/harness/authtest"
	"github.com/scoreflow/scoreflow/harness/devrun"
	"github.com/scoreflow/scoreflow/pkg/agentgateway"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

// checkSourceIsTheSender: with sender identity on, the static-scorer's Trigger identity may write
// its own resource under its own source, and the writer writes it; the same identity posing as
// cluster2's DSF agent (its source, a never-expiring score of the static-scorer's own resource) is
// refused by the Broker, and nothing of it reaches the hub: the writer's ledger, redelivery
// detection and retirement of never-expiring names, all keyed on the source, cannot be steered
// by a sender choosing another's.
func checkSourceIsTheSender(t *testing.T, ctx context.Context, s *devrun.Stack) {
	t.Helper()
	const resource = "demo-performance-score"
	token := authtest.Token(t, s.Hub.Kube, devrun.Namespace, "static-scorer-oidc-eventing.knative.dev-trigger", scoreflowBrokerAudience)
	score := func(source, name string, neverExpires bool) int {
		e := scoreEvent(t, source, contract.ScoreUpdated{Resource: resource, NeverExpires: neverExpires,
			Items: []contract.ClusterScores{{Cluster: "cluster2", Scores: []contract.Score{{Name: name, Value: 100}}}}})
		e.SetExtension(contract.ExtResource, resource)
		return postEvent(t, s.BrokerURL, token, e)
	}
	written := func() map[string]int32 {
		out := map[string]int32{}
		if aps, err := s.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("cluster2").Get(ctx, resource, metav1.GetOptions{}); err == nil {
			for _, sc := range aps.Status.Scores {
				out[sc.Name] = sc.Value
			}
		}
		return out
	}
	if st := score("scoreflow/static-scorer", "own-source", false); st != http.StatusAccepted {
		t.Fatalf("the static-scorer's score under its own source: the broker answered %d, want 202", st)
	}
	eventually(t, 60*time.Second, "the static-scorer's score under its own source was not written", func() bool { return written()["own-source"] == 100 })
	if st := score(agentgateway.SourcePrefix+"scoreflow-dsf-agent/cluster2", "posing", true); st != http.StatusForbidden {
		t.Errorf("the static-scorer posing as cluster2's DSF agent: the broker answered %d, want 403", st)
	}
	time.Sleep(2 * time.Second) // time for a refused score to land, had it been admitted
	if v, ok := written()["posing"]; ok {
		t.Errorf("the static-scorer's score posing as an agent was written: %d", v)
	}
}
