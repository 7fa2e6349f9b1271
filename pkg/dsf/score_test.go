package dsf

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

func res(score float64, kv ...string) Result {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return Result{Metric: m, Score: &score}
}

func TestMapResults(t *testing.T) {
	p := &Plan{ScoreName: "llm_forecast_score", Format: "${node};${namespace};${pod}"}
	agent := scope{Cluster: "cluster1"}
	tests := []struct {
		name    string
		plan    *Plan
		sc      scope
		results []Result
		items   []contract.ClusterScores
		clamped int
		dropped map[string]int
	}{
		{"agent: every result is the agent's cluster's, a cluster label is ignored as DSF does", p, agent, []Result{
			res(12.9, "node", "n1", "namespace", "ns", "pod", "a", "cluster", "cluster9"),
			res(-0.7, "node", "n1", "namespace", "ns", "pod", "b"),
		}, []contract.ClusterScores{{Cluster: "cluster1", Scores: []contract.Score{{Name: "n1;ns;a", Value: 12}, {Name: "n1;ns;b", Value: 0}}}}, 0, map[string]int{}},
		{"values truncated as DSF's int32(score), then clamped", &Plan{ScoreName: "s", Format: "${app}"}, agent, []Result{
			res(99.99, "app", "a"), res(-100.5, "app", "b"), res(250, "app", "c"),
		}, []contract.ClusterScores{{Cluster: "cluster1", Scores: []contract.Score{{Name: "a", Value: 99}, {Name: "b", Value: -100}, {Name: "c", Value: 100}}}}, 1, map[string]int{}},
		{"a name twice keeps the first (DSF keeps one), counted", p, agent, []Result{
			res(1, "node", "n1", "namespace", "ns", "pod", "a", "container", "x"),
			res(2, "node", "n1", "namespace", "ns", "pod", "a", "container", "y"),
		}, []contract.ClusterScores{{Cluster: "cluster1", Scores: []contract.Score{{Name: "n1;ns;a", Value: 1}}}}, 0, map[string]int{dropDuplicate: 1}},
		{"names no item may have (a missing label's leading ;, a /) are counted, not silent", p, agent, []Result{
			res(1, "namespace", "ns", "pod", "a"),
			res(2, "node", "n1", "namespace", "team/ns", "pod", "a"),
			res(3, "node", "n1", "namespace", "ns", "pod", "ok"),
		}, []contract.ClusterScores{{Cluster: "cluster1", Scores: []contract.Score{{Name: "n1;ns;ok", Value: 3}}}}, 0, map[string]int{dropName: 2}},
		{"hub: the cluster label, masks by {clusterName, scoreName}", &Plan{ScoreName: "llm_forecast_score", Format: "${scoreName}"},
			scope{ClusterLabel: "cluster", Masks: NewMasks([]Mask{{ClusterName: "cluster2", ScoreName: "llm_forecast_score"}, {ClusterName: "cluster1", ScoreName: "other"}})}, []Result{
				res(5, "cluster", "cluster1"), res(6, "cluster", "cluster2"), res(7), res(8, "cluster", "kube-system"),
			}, []contract.ClusterScores{{Cluster: "cluster1", Scores: []contract.Score{{Name: "llm_forecast_score", Value: 5}}}}, 0, map[string]int{dropMasked: 1, dropCluster: 2}},
		{"no score", p, agent, []Result{{Metric: map[string]string{"node": "n"}}}, nil, 0, map[string]int{dropScore: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tt.plan.mapResults(tt.results, tt.sc)
			if !reflect.DeepEqual(m.Items, tt.items) || m.Clamped != tt.clamped || !reflect.DeepEqual(m.Dropped, tt.dropped) {
				t.Errorf("got %+v clamped %d dropped %v\nwant %+v clamped %d dropped %v", m.Items, m.Clamped, m.Dropped, tt.items, tt.clamped, tt.dropped)
			}
			for why := range tt.dropped {
				if why != dropScore && m.Example[why] == "" {
					t.Errorf("no example of %s for the log", why)
				}
			}
		})
	}
}

// TestMapResultsManyPods: ${node};${namespace};${pod} on a cluster of 2,500 pods lands whole, one
// item of 2,500 scores that the contract accepts.
func TestMapResultsManyPods(t *testing.T) {
	const pods = 2500
	p := &Plan{ScoreName: "sample_my_score", Resource: "sample-my-score", Format: "${node};${namespace};${pod}"}
	var rs []Result
	for i := range pods {
		rs = append(rs, res(float64(i%100), "node", fmt.Sprintf("worker-%02d.cluster1.example.com", i%40), "namespace", fmt.Sprintf("team-%03d", i%150), "pod", fmt.Sprintf("app-%05d-7d9f8b6c5d-x2x9z", i)))
	}
	m := p.mapResults(rs, scope{Cluster: "cluster1"})
	if len(m.Items) != 1 || len(m.Items[0].Scores) != pods || len(m.Dropped) != 0 {
		t.Fatalf("%d items, %d scores, dropped %v; want 1 item of %d", len(m.Items), len(m.Items[0].Scores), m.Dropped, pods)
	}
	su := contract.ScoreUpdated{Resource: p.Resource, Items: m.Items}
	if err := su.Validate(); err != nil {
		t.Fatalf("the contract refuses a cluster of %d pods: %v", pods, err)
	}
}
