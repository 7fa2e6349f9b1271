package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonclient "open-cluster-management.io/api/client/addon/clientset/versioned"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

var (
	scorersGVR = schema.GroupVersionResource{Group: "dynamic-scoring.open-cluster-management.io", Version: "v1alpha1", Resource: "dynamicscorers"}
	configsGVR = schema.GroupVersionResource{Group: "dynamic-scoring.open-cluster-management.io", Version: "v1alpha1", Resource: "dynamicscoringconfigs"}
)

const (
	hubNS   = "open-cluster-management"
	agentNS = "dynamic-scoring"
)

// TestAgentKeepsDSFSemantics runs the binary in agent mode, configured as addon/dsf's template
// configures it, for two managed clusters, against a local hub holding DynamicScorers of scorers
// nobody tuned scoreflow for: their own names, hosts, paths, Secret name and key, no ENDPOINTS.
// Each scorer is a real TCP listener that counts the connections it accepts. The hub's status is
// what its status writer writes (Active, /config synced). It checks DSF's semantics:
//   - without a DynamicScoringConfig on the hub, no agent contacts any scorer;
//   - a mask for cluster2 keeps cluster2's agent from ever connecting to that scorer, while
//     cluster2's agent runs the other one;
//   - a host named only in the spec is contacted as written;
//   - the token comes from the Secret and key the spec names, read through the managed cluster's
//     API, and goes to the scorer the spec pairs it with;
//   - scoreDestination None: the scorer is called and its raw score exported as DSF's
//     dynamic_score, nothing is sent to the gateway.
func TestAgentKeepsDSFSemantics(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	if err := hub.InstallAddonCRDs(); err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(hub.Config, envtest.CRDInstallOptions{Paths: []string{"../../addon/dsf/crds"}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{hubNS, agentNS} {
		if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	addons := addonclient.NewForConfigOrDie(hub.Config)
	for _, c := range []string{"cluster1", "cluster2"} {
		if err := hub.AddCluster(ctx, c, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := addons.AddonV1alpha1().ManagedClusterAddOns(c).Create(ctx, &addonv1alpha1.ManagedClusterAddOn{
			ObjectMeta: metav1.ObjectMeta{Name: "scoreflow-dsf-agent", Namespace: c}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The token, in a Secret and key of the administrator's own naming, on the managed cluster (the
	// local API server stands in for it).
	if _, err := hub.Kube.CoreV1().Secrets(agentNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "acme-credentials"},
		StringData: map[string]string{"bearer": "acme-t0ken"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	latency := newListener(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/acme/config":
			_, _ = w.Write([]byte(`{"name": "acme", "description": "acme latency", "source": {"type": "None", "path": ""},
				"scoring": {"path": "/acme/v2/score", "params": {"name": "acme_latency", "interval": 2}}}`))
		case "/acme/v2/score":
			if r.Header.Get("Authorization") != "Bearer acme-t0ken" {
				http.Error(w, "no", http.StatusUnauthorized)
				return
			}
			_, _ = w.Write([]byte(`{"results": [{"metric": {"app": "shop", "device": "gpu0"}, "score": 42.7}]}`))
		default:
			http.NotFound(w, r)
		}
	})
	metric := newListener(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"results": [{"metric": {"node": "n1"}, "score": 7.25}]}`))
	})
	dyn := dynamic.NewForConfigOrDie(hub.Config)
	apply := func(gvr schema.GroupVersionResource, doc string, status map[string]any) {
		t.Helper()
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		created, err := dyn.Resource(gvr).Namespace(hubNS).Create(ctx, &u, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if status != nil {
			created.Object["status"] = status
			if _, err := dyn.Resource(gvr).Namespace(hubNS).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	apply(scorersGVR, fmt.Sprintf(`apiVersion: dynamic-scoring.open-cluster-management.io/v1alpha1
kind: DynamicScorer
metadata: {name: acme-latency}
spec:
  description: acme's latency scorer
  configURL: %s/acme/config
  configSyncMode: Full
  location: External
  scoreDestination: AddOnPlacementScore
  scoreDimensionFormat: "${app};${device}"
  scoring:
    auth: {tokenSecretRef: {name: acme-credentials, key: bearer}}
`, latency.URL), map[string]any{"healthStatus": "Active", "lastSyncedConfig": map[string]any{
		"name": "acme", "description": "acme latency", "source": map[string]any{"type": "None", "path": "", "params": map[string]any{"query": "", "range": 0, "step": 0}},
		"scoring": map[string]any{"path": "/acme/v2/score", "params": map[string]any{"name": "acme_latency", "interval": 2}}}})
	apply(scorersGVR, fmt.Sprintf(`apiVersion: dynamic-scoring.open-cluster-management.io/v1alpha1
kind: DynamicScorer
metadata: {name: acme-metric}
spec:
  description: exported as a metric only
  configURL: %s/config
  configSyncMode: None
  location: Internal
  scoreDestination: None
  source: {type: None}
  scoring: {path: /score, params: {name: acme_metric, interval: 2}}
`, metric.URL), map[string]any{"healthStatus": "Active"})

	gateway := newGateway(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := hub.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	agent := func(cluster string) *functest.Process {
		return functest.Start(t, []string{"CLUSTER=" + cluster, "HUB_KUBECONFIG=" + kubeconfig, "HUB_TOKEN_ADDON=scoreflow-dsf-agent",
			"SINK_TOKEN_FILE=" + filepath.Join(t.TempDir(), "token"), "K_SINK=" + gateway.URL,
			"MANAGED_KUBECONFIG=" + kubeconfig, "SECRETS_NAMESPACE=" + agentNS, "REQUEST_TIMEOUT=5s"})
	}

	// No DynamicScoringConfig: DSF distributes no scorer, and no agent contacts one.
	a2 := agent("cluster2")
	a1 := agent("cluster1")
	time.Sleep(5 * time.Second) // two intervals and more
	if n, m := latency.conns.Load(), metric.conns.Load(); n != 0 || m != 0 {
		t.Fatalf("without a DynamicScoringConfig the scorers got %d and %d connections (%q %q), want none", n, m, latency.requests(), metric.requests())
	}
	a1.Stop(t, 30*time.Second)

	// The DynamicScoringConfig masks acme_latency for cluster2: its agent runs acme-metric only.
	apply(configsGVR, `apiVersion: dynamic-scoring.open-cluster-management.io/v1alpha1
kind: DynamicScoringConfig
metadata: {name: dynamic-scoring-config}
spec:
  masks:
    - {clusterName: cluster2, scoreName: acme_latency}
`, nil)
	waitFor(ctx, t, "cluster2's agent calling acme-metric", func() bool { return metric.conns.Load() > 0 })
	waitFor(ctx, t, "cluster2's dynamic_score of acme_metric", func() bool {
		_, body := functest.Get(t, a2.URL+"/metrics")
		return strings.Contains(body, `dynamic_score{ds_app="",ds_cluster="cluster2",ds_container="",ds_device="",ds_meta="",ds_namespace="",ds_node="n1",ds_pod="",ds_score_name="acme_metric"} 7.25`)
	})
	time.Sleep(3 * time.Second) // another round of each
	if n := latency.conns.Load(); n != 0 {
		t.Fatalf("acme_latency is masked for cluster2, yet its scorer got %d connections (%q)", n, latency.requests())
	}

	// cluster1's agent: acme-latency runs with the Secret's token; acme-metric is exported only.
	a1 = agent("cluster1")
	var su *contract.ScoreUpdated
	waitFor(ctx, t, "cluster1's acme-latency scores at the gateway", func() bool {
		su = gateway.latest("acme-latency")
		return su != nil
	})
	want := []contract.ClusterScores{{Cluster: "cluster1", Scores: []contract.Score{{Name: "shop;gpu0", Value: 42}}}}
	if fmt.Sprint(su.Items) != fmt.Sprint(want) {
		t.Errorf("acme-latency: %+v, want %+v", su.Items, want)
	}
	for _, r := range latency.requests() {
		if strings.HasPrefix(r, "POST /acme/v2/score") && !strings.HasSuffix(r, "Bearer acme-t0ken") {
			t.Errorf("a scoring request without the spec's token: %q", r)
		}
		if strings.HasPrefix(r, "GET") {
			t.Errorf("an agent asked the scorer itself (%q): its /config is the hub's status", r)
		}
	}
	_, body := functest.Get(t, a1.URL+"/metrics")
	for _, m := range []string{
		`dynamic_score{ds_app="shop",ds_cluster="cluster1",ds_container="",ds_device="gpu0",ds_meta="",ds_namespace="",ds_node="",ds_pod="",ds_score_name="acme_latency"} 42.7`,
		`dynamic_scoring_requests_total{score_name="acme_latency",status="success"}`,
		`dynamic_scoring_perform_seconds_total{score_name="acme_latency"}`,
		`dynamic_scoring_send_seconds_total{score_name="acme_latency"}`,
	} {
		if !strings.Contains(body, m) {
			t.Errorf("cluster1's /metrics lacks %s", m)
		}
	}
	if r := gateway.resources(); fmt.Sprint(r) != "[acme-latency]" {
		t.Errorf("the gateway received %v, want acme-latency only (acme-metric's destination is None)", r)
	}
	if strings.Contains(a1.Output()+a2.Output(), "acme-t0ken") {
		t.Error("a token is in an agent's log")
	}
}

// gateway stands in for the hub's agent gateway: it records every score.updated.
type gateway struct {
	URL  string
	mu   sync.Mutex
	sent []*contract.ScoreUpdated
}

func newGateway(t *testing.T) *gateway {
	g := &gateway{}
	l := newListener(t, func(w http.ResponseWriter, r *http.Request) {
		e, err := binding.ToEvent(r.Context(), cehttp.NewMessageFromHttpRequest(r))
		if err == nil {
			if su, err := contract.DecodeScoreUpdated(e); err == nil {
				g.mu.Lock()
				g.sent = append(g.sent, su)
				g.mu.Unlock()
			}
		}
		w.WriteHeader(http.StatusAccepted)
	})
	g.URL = l.URL
	return g
}

func (g *gateway) latest(resource string) *contract.ScoreUpdated {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := len(g.sent) - 1; i >= 0; i-- {
		if g.sent[i].Resource == resource {
			return g.sent[i]
		}
	}
	return nil
}

func (g *gateway) resources() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, s := range g.sent {
		if !seen[s.Resource] {
			seen[s.Resource] = true
			out = append(out, s.Resource)
		}
	}
	return out
}

func (l *listener) requests() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.seen...)
}

func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
