package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/scoreflow/scoreflow/harness/devrun"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

// TestOptimizeTheDemo: with the stack `make run` starts, scores for app01 on gpu0 (cluster1 90,
// cluster2 60) go through the broker to the writer; an optimize.requested through the broker
// reaches the optimizer process, whose optimize.done comes back through the broker with the plan
// (app01 on cluster1), and the plan's policy Placement decides cluster1.
func TestOptimizeTheDemo(t *testing.T) {
	const score = "demo-performance-score"
	now := time.Now()
	su, err := contract.NewScoreUpdated("test/e2e", now, contract.ScoreUpdated{Resource: score, Items: []contract.ClusterScores{
		{Cluster: "cluster1", Scores: []contract.Score{{Name: "app01;gpu0", Value: 90}}},
		{Cluster: "cluster2", Scores: []contract.Score{{Name: "app01;gpu0", Value: 60}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if st := post(t, su); st != http.StatusAccepted {
		t.Fatalf("broker answered %d", st)
	}
	eventually(t, 30*time.Second, "scores not written", func() bool {
		r := observed.results(su.ID())
		return len(r) == 1
	})

	req := cloudevents.NewEvent()
	req.SetID(uuid.NewString())
	req.SetSource("test/e2e")
	req.SetType(optimizer.TypeRequested)
	_ = req.SetData(cloudevents.ApplicationJSON, devrun.DemoOptimizeRequest(score))
	if st := post(t, req); st != http.StatusAccepted {
		t.Fatalf("broker answered %d", st)
	}
	var plan optimizer.Plan
	eventually(t, 60*time.Second, "no optimize.done for the request", func() bool {
		observed.mu.Lock()
		defer observed.mu.Unlock()
		for _, e := range observed.events {
			if e.Type() == optimizer.TypeDone && json.Unmarshal(e.Data(), &plan) == nil && plan.Input != nil && plan.Input.ID == req.ID() {
				return true
			}
		}
		return false
	})
	if len(plan.Workloads) != 1 || plan.Workloads[0].Cluster != "cluster1" || plan.Objective != 90 {
		t.Fatalf("plan %+v", plan)
	}
	var pl string
	for _, c := range plan.Clusters {
		if c.Name == "cluster1" {
			pl = c.Placement
		}
	}
	eventually(t, 30*time.Second, "the policy Placement did not choose cluster1", func() bool {
		d, err := devrun.Decision(context.Background(), stack.Hub.Cluster, devrun.Namespace, pl)
		return err == nil && len(d) == 1 && d[0] == "cluster1"
	})
	if _, err := stack.Hub.Cluster.ClusterV1beta1().Placements(devrun.Namespace).Get(context.Background(), devrun.DemoWorkloadPlacement, metav1.GetOptions{}); err != nil {
		t.Errorf("the workload's Placement: %v", err)
	}
}
