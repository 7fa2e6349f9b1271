package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/harness/dsfupstream"
	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/harness/promserver"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

// deployedEnv is the literal environment deploy/dsf-bridge.yaml gives the bridge, but for the
// paths this test replaces (the scorers file, the token directory): the binary runs as deployed.
func deployedEnv(t *testing.T) []string {
	t.Helper()
	s, err := manifests.Load(filepath.Join("..", "..", "deploy", "dsf-bridge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	svc, ok := manifests.Find(s.Services, "scoreflow", "dsf-bridge")
	if !ok {
		t.Fatal("deploy/dsf-bridge.yaml has no Service dsf-bridge")
	}
	var env []string
	for _, e := range svc.Object.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom == nil && e.Name != "SCORERS_FILE" && e.Name != "TOKEN_DIR" {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	return env
}

// TestScorerAddedToTheScorersFileOnly: the bridge, as deploy/dsf-bridge.yaml deploys it, runs a
// DynamicScorer whose score name no scoreflow manifest lists, added to its scorers file and
// nowhere else: DSF's own sample scorer scores it, and the reply is its score.updated under the
// resource the spec names, carried in scoreflowresource (which the broker's EventPolicy requires).
// A scorer whose /config (configSyncMode Full) makes another resource than its spec names is
// refused 400 BadConfig, before any query.
func TestScorerAddedToTheScorersFileOnly(t *testing.T) {
	prom := promserver.Start(t)
	at := promserver.Aligned(time.Minute)
	l := func(cluster string) map[string]string {
		return map[string]string{"__name__": "gpu_free", "cluster": cluster, "app": "train"}
	}
	prom.MustPush(t, promserver.Grid(l("east"), at, time.Minute, 7, 7, 7), promserver.Grid(l("west"), at, time.Minute, 3, 3, 3))
	sample := dsfupstream.Scorer(t, "sample-scorer")

	const scorerHost = "http://gpu-headroom.team-a.svc:8000"
	scorers := filepath.Join(t.TempDir(), "scorers.yaml")
	spec := func(name, sync, scoreName string) string {
		return fmt.Sprintf(`---
apiVersion: dynamic-scoring.open-cluster-management.io/v1alpha1
kind: DynamicScorer
metadata: {name: %s}
spec:
  description: a team's own scorer
  configURL: %s/config
  configSyncMode: %s
  location: Internal
  scoreDestination: AddOnPlacementScore
  scoreDimensionFormat: "${app}"
  source:
    type: Prometheus
    host: http://thanos.monitoring.svc:9090
    path: /api/v1/query_range
    params: {query: 'max by (cluster, app) (gpu_free)', range: 120, step: 60}
  scoring: {path: /scoring, params: {name: %s, interval: 60}}
`, name, scorerHost, sync, scoreName)
	}
	// DSF's sample scorer's /config names sample_my_score: with Full sync it decides the score.
	docs := spec("gpu-headroom", "None", "Team_GPU_Headroom") + spec("renamed-by-config", "Full", "team_gpu_spare")
	if err := os.WriteFile(scorers, []byte(docs), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(deployedEnv(t), "SCORERS_FILE="+scorers, "TOKEN_DIR="+t.TempDir(),
		"ENDPOINTS=http://thanos.monitoring.svc:9090="+prom.URL+","+scorerHost+"="+sample)
	fn := functest.Start(t, env)

	status, reply := functest.Send(t, fn.URL, functest.Ping(`{"scorer": "gpu-headroom"}`))
	if status != http.StatusOK || reply == nil {
		t.Fatalf("status %d reply %v, want 200 and a score.updated\n%s", status, reply, fn.Output())
	}
	got, err := contract.DecodeScoreUpdated(reply)
	if err != nil {
		t.Fatal(err)
	}
	want := []contract.ClusterScores{{Cluster: "east", Scores: []contract.Score{{Name: "train", Value: 7}}}, {Cluster: "west", Scores: []contract.Score{{Name: "train", Value: 3}}}}
	if got.Resource != "team-gpu-headroom" || !reflect.DeepEqual(got.Items, want) {
		t.Errorf("got %s %+v, want team-gpu-headroom %+v", got.Resource, got.Items, want)
	}
	if ext, _ := reply.Extensions()[contract.ExtResource].(string); ext != "team-gpu-headroom" {
		t.Errorf("the reply's %s is %q, want team-gpu-headroom", contract.ExtResource, ext)
	}

	status, reply = functest.Send(t, fn.URL, functest.Ping(`{"scorer": "renamed-by-config"}`))
	_, fail := functest.Reply(t, reply)
	if status != http.StatusBadRequest || fail == nil || fail.Reason != contract.ReasonBadConfig ||
		!strings.Contains(fail.Message, `resource "sample-my-score", not the spec's "team-gpu-spare"`) {
		t.Errorf("status %d failure %+v, want 400 BadConfig naming sample-my-score and team-gpu-spare", status, fail)
	}
}
