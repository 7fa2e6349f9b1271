package oidc

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"

	"github.com/scoreflow/scoreflow/harness/authtest"
	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/agentgateway"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

// TestBrokerIngressEnforcesTheFilters applies oidc/eventpolicies.yaml, unmodified, to the stock
// Knative broker with sender identity on, and posts as the identities it names: each sender's own
// events are admitted (202); a forged scoreflowresource, a scorer sending optimize.requested or a
// ping, a schedule pinging another scorer, the watcher sending scores, the agent gateway or the
// dsf-bridge sending a score without scoreflowresource (any resource they name passes: the gateway
// decides them from the hub's objects, the bridge from its scorers file), and any sender but the
// gateway posting under an agent's source (a never-expiring score of its own resource, which the
// writer would record as the agent's) or another sender's, are refused (403) by the ingress
// itself; and only the admitted events reach a Trigger that takes everything.
func TestBrokerIngressEnforcesTheFilters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hub.Stop() }()
	kn, err := knlocal.Start(ctx, hub, knlocal.Options{StateDir: t.TempDir(), LockWait: 20 * time.Minute, Features: knlocal.OIDCFeatures()})
	if err != nil {
		t.Fatal(err)
	}
	defer kn.Stop()
	defer func() {
		if t.Failed() {
			t.Logf("Knative logs: %s", kn.LogDir)
		}
	}()
	seen := functest.NewSink(t, nil)
	objs, err := knlocal.Decode(strings.NewReader(fmt.Sprintf(`
apiVersion: v1
kind: Namespace
metadata: {name: scoreflow}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: scoreflow, namespace: scoreflow}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: everything, namespace: scoreflow}
spec:
  broker: scoreflow
  subscriber: {uri: %s}
`, seen.URL)))
	if err != nil {
		t.Fatal(err)
	}
	policies, err := knlocal.ReadFiles(repo + "/oidc/eventpolicies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := kn.Applier.Apply(ctx, append(objs, policies...)...); err != nil {
		t.Fatal(err)
	}
	if err := kn.WaitReady(ctx, ns, 90*time.Second, knlocal.BrokerKind, knlocal.TriggerKind, knlocal.EventPolicyKind); err != nil {
		t.Fatal(err)
	}
	ingress := kn.IngressURL + "/scoreflow/scoreflow"

	const (
		promqlTrigger  = "promql-scorer-oidc-eventing.knative.dev-trigger"
		promqlSchedule = "promql-cpu-idle-oidc-sources.knative.dev-pingsource"
		watcher        = "metric-watcher-oidc-sources.knative.dev-sinkbinding"
		gateway        = "agent-gateway-oidc-sources.knative.dev-sinkbinding"
		writerTrigger  = "score-writer-oidc-eventing.knative.dev-trigger"
		staticTrigger  = "static-scorer-oidc-eventing.knative.dev-trigger"
		staticParts    = "static-scorer-oidc-sources.knative.dev-sinkbinding"
		bridgeTrigger  = "dsf-bridge-oidc-eventing.knative.dev-trigger"
	)
	score := func(resource, extension, source string) event.Event {
		e := newEvent(contract.TypeScoreUpdated, source)
		if extension != "" {
			e.SetExtension(contract.ExtResource, extension)
		}
		_ = e.SetData(cloudevents.ApplicationJSON, contract.ScoreUpdated{Resource: resource,
			Items: []contract.ClusterScores{{Cluster: "cluster3", Scores: []contract.Score{{Name: "s", Value: 100}}}}})
		return e
	}
	const promqlPing = "/apis/v1/namespaces/scoreflow/pingsources/promql-cpu-idle"
	ping := func(scorer, source string) event.Event {
		e := newEvent(contract.TypePing, source)
		if scorer != "" {
			e.SetExtension("scorer", scorer)
		}
		_ = e.SetData(cloudevents.ApplicationJSON, []byte(`{"resource":"cpu-idle"}`))
		return e
	}
	of := func(typ, source string) event.Event {
		e := newEvent(typ, source)
		_ = e.SetData(cloudevents.ApplicationJSON, []byte(`{"namespace":"kube-system"}`))
		return e
	}
	// The static-scorer's identity posing as the DSF agent of cluster2, with a never-expiring
	// score of its own resource: refused for the source alone.
	posing := func() event.Event {
		e := newEvent(contract.TypeScoreUpdated, agentgateway.SourcePrefix+"scoreflow-dsf-agent/cluster2")
		e.SetExtension(contract.ExtResource, "demo-performance-score")
		_ = e.SetData(cloudevents.ApplicationJSON, contract.ScoreUpdated{Resource: "demo-performance-score", NeverExpires: true,
			Items: []contract.ClusterScores{{Cluster: "cluster2", Scores: []contract.Score{{Name: "s", Value: 100}}}}})
		return e
	}
	agentSource := agentgateway.SourcePrefix + "scoreflow-latency-agent/cluster1"
	cases := []struct {
		name, sa string
		e        event.Event
		status   int
	}{
		{"the promql-scorer's score of cpu-idle", promqlTrigger, score("cpu-idle", "cpu-idle", "scoreflow/promql-scorer"), http.StatusAccepted},
		{"the promql-scorer's score.failed", promqlTrigger, of(contract.TypeScoreFailed, "scoreflow/promql-scorer"), http.StatusAccepted},
		{"the promql-scorer forging another resource", promqlTrigger, score("cluster-health", "cluster-health", "scoreflow/promql-scorer"), http.StatusForbidden},
		{"the promql-scorer without scoreflowresource", promqlTrigger, score("cpu-idle", "", "scoreflow/promql-scorer"), http.StatusForbidden},
		{"the promql-scorer sending optimize.requested", promqlTrigger, of(optimizer.TypeRequested, "scoreflow/promql-scorer"), http.StatusForbidden},
		{"the promql-scorer sending optimize.reset.requested", promqlTrigger, of(optimizer.TypeResetRequested, "scoreflow/promql-scorer"), http.StatusForbidden},
		{"the promql-scorer sending a ping", promqlTrigger, ping("promql-scorer", promqlPing), http.StatusForbidden},
		{"the promql-scorer posing as an agent", promqlTrigger, score("cpu-idle", "cpu-idle", agentSource), http.StatusForbidden},
		{"the promql-scorer posing as another scorer", promqlTrigger, score("cpu-idle", "cpu-idle", "scoreflow/resource-scorer"), http.StatusForbidden},
		{"the static-scorer's score", staticTrigger, score("demo-performance-score", "demo-performance-score", "scoreflow/static-scorer"), http.StatusAccepted},
		{"the static-scorer posing as cluster2's DSF agent, never expiring", staticTrigger, posing(), http.StatusForbidden},
		{"the static-scorer's parts posing as cluster2's DSF agent", staticParts, posing(), http.StatusForbidden},
		{"the promql schedule's ping", promqlSchedule, ping("promql-scorer", promqlPing), http.StatusAccepted},
		{"the promql schedule pinging another scorer", promqlSchedule, ping("dsf-bridge", promqlPing), http.StatusForbidden},
		{"the promql schedule posing as another schedule", promqlSchedule, ping("promql-scorer", "/apis/v1/namespaces/scoreflow/pingsources/p"), http.StatusForbidden},
		{"the promql schedule sending a score", promqlSchedule, score("cpu-idle", "cpu-idle", promqlPing), http.StatusForbidden},
		{"the watcher's metric.changed", watcher, of(contract.TypeMetricChanged, "scoreflow/metric-watcher"), http.StatusAccepted},
		{"the watcher posing as the alertmanager-adapter", watcher, of(contract.TypeMetricChanged, "scoreflow/alertmanager-adapter"), http.StatusForbidden},
		{"the watcher sending a score", watcher, score("cpu-idle", "cpu-idle", "scoreflow/metric-watcher"), http.StatusForbidden},
		{"the gateway's agent score", gateway, score("latency", "latency", agentSource), http.StatusAccepted},
		{"the gateway's agent score of a resource no manifest lists", gateway, score("acme-cpu", "acme-cpu", agentSource), http.StatusAccepted},
		{"the gateway's score without scoreflowresource", gateway, score("latency", "", agentSource), http.StatusForbidden},
		{"the gateway's score not from an agent", gateway, score("latency", "latency", "scoreflow/agent-gateway"), http.StatusForbidden},
		{"the dsf-bridge's score of a scorer no manifest lists", bridgeTrigger, score("team-gpu-headroom", "team-gpu-headroom", "scoreflow/dsf-bridge"), http.StatusAccepted},
		{"the dsf-bridge's score without scoreflowresource", bridgeTrigger, score("team-gpu-headroom", "", "scoreflow/dsf-bridge"), http.StatusForbidden},
		{"the dsf-bridge posing as an agent", bridgeTrigger, score("team-gpu-headroom", "team-gpu-headroom", agentSource), http.StatusForbidden},
		{"the writer's write.done", writerTrigger, of(contract.TypeWriteDone, "scoreflow/score-writer"), http.StatusAccepted},
		{"the writer's write.done posing as an agent", writerTrigger, of(contract.TypeWriteDone, agentSource), http.StatusForbidden},
		{"the writer sending a score", writerTrigger, score("cpu-idle", "cpu-idle", "scoreflow/score-writer"), http.StatusForbidden},
	}
	admitted := map[string]bool{}
	for _, c := range cases {
		tok := authtest.Token(t, hub.Kube, ns, c.sa, scoreflowBrokerAudience)
		st := postEvent(t, ingress, tok, c.e)
		// A policy is enforced once the Broker's status lists it; they were all Ready above, but
		// give the ingress's informer a moment on the first request.
		for deadline := time.Now().Add(30 * time.Second); st != c.status && time.Now().Before(deadline); st = postEvent(t, ingress, tok, c.e) {
			time.Sleep(200 * time.Millisecond)
		}
		if st != c.status {
			t.Errorf("%s: the broker answered %d, want %d", c.name, st, c.status)
		}
		admitted[c.e.ID()] = c.status == http.StatusAccepted
	}
	deadline := time.Now().Add(30 * time.Second)
	got := map[string]bool{}
	for {
		for _, e := range seen.Take() {
			got[e.ID()] = true
		}
		all := true
		for id, ok := range admitted {
			all = all && (!ok || got[id])
		}
		if all || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, c := range cases {
		if got[c.e.ID()] != admitted[c.e.ID()] {
			t.Errorf("%s: delivered to the Trigger: %v, want %v", c.name, got[c.e.ID()], admitted[c.e.ID()])
		}
	}
	if crashed := kn.Crashed(); len(crashed) > 0 {
		t.Errorf("Knative processes crashed: %v", crashed)
	}
}

func newEvent(typ, source string) event.Event {
	e := cloudevents.NewEvent()
	e.SetID(uuid.NewString())
	e.SetSource(source)
	e.SetType(typ)
	e.SetTime(time.Now())
	return e
}
