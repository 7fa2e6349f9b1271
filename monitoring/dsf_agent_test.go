package monitoring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/harness/dsfupstream"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/harness/proc"
	"github.com/scoreflow/scoreflow/harness/promserver"
	"github.com/scoreflow/scoreflow/pkg/dsf"
	"github.com/scoreflow/scoreflow/tools"
)

const (
	dsfServiceMonitorFile = "managed-cluster/dsf-agent-servicemonitor.yaml"
	dsfAgentNS            = "dynamic-scoring"
	// dsfDashboardQuery is DSF's Grafana dashboard's panel, verbatim
	// (dynamic-scoring-framework deploy/grafana/sample-dashboard.json, "Prediction Score").
	dsfDashboardQuery = `sum by(ds_cluster) (dynamic_score{ds_score_name="simple_prediction_score"})`
)

// TestDSFServiceMonitorScrapesTheAgent: DSF's ServiceMonitor, applied on a managed cluster, selects
// the metrics Service the addon distributes (addon/dsf's template, as it is) and the real Prometheus,
// with the scrape configuration the Prometheus Operator renders from it, scrapes the agent's
// dynamic_score: DSF's dashboard's query returns the cluster's raw score. The agent runs (the
// dsf-bridge binary in agent mode) a DynamicScorer of scoreDestination None served by DSF's own
// sample scorer: it scores, exports, and sends nothing.
func TestDSFServiceMonitorScrapesTheAgent(t *testing.T) {
	if _, err := tools.Path(tools.PrometheusKubernetesSD); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(dsfServiceMonitorFile)
	if err != nil {
		t.Fatal(err)
	}
	sm, err := promserver.ParseServiceMonitor(raw)
	if err != nil {
		t.Fatalf("%s: %v", dsfServiceMonitorFile, err)
	}
	svc, dep := dsfAgentObjects(t)
	if !labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) || svc.Namespace != sm.Spec.NamespaceSelector.MatchNames[0] ||
		svc.Spec.Ports[0].Name != sm.Spec.Endpoints[0].Port {
		t.Fatalf("%s does not select the addon's Service %s/%s %v port %s", dsfServiceMonitorFile, svc.Namespace, svc.Name, svc.Labels, svc.Spec.Ports[0].Name)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	// One local API server is the hub (the DynamicScorer) and the managed cluster (the Service,
	// the agent's pod and the Service's endpoints, which the endpoints controller would write).
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	if _, err := envtest.InstallCRDs(hub.Config, envtest.CRDInstallOptions{Paths: []string{"../addon/dsf/crds"}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{dsfAgentNS, "open-cluster-management"} {
		if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	prom := promserver.Start(t)
	now := promserver.Aligned(time.Minute)
	var series []promserver.Series
	for i, rate := range []float64{2.5, 4.5} {
		series = append(series, promserver.Counter(map[string]string{"__name__": "container_cpu_usage_seconds_total", "node": "worker-1",
			"namespace": "shop", "pod": fmt.Sprintf("web-%d", i), "container": "web"}, rate, now))
	}
	prom.MustPush(t, series...)
	sample := dsfupstream.Scorer(t, "sample-scorer")
	dyn := dynamic.NewForConfigOrDie(hub.Config)
	for _, doc := range []string{fmt.Sprintf(`apiVersion: dynamic-scoring.open-cluster-management.io/v1alpha1
kind: DynamicScorer
metadata: {name: simple-prediction-scorer, namespace: open-cluster-management}
spec:
  description: exported as a metric only
  configURL: %s/config
  configSyncMode: None
  location: Internal
  scoreDestination: None
  scoreDimensionFormat: "${pod}"
  source:
    type: Prometheus
    host: %s
    path: /api/v1/query_range
    params: {query: 'sum by (node, namespace, pod) (rate(container_cpu_usage_seconds_total[1m]))', range: 600, step: 60}
  scoring: {path: /scoring, params: {name: simple_prediction_score, interval: 30}}
`, sample, prom.URL), `apiVersion: dynamic-scoring.open-cluster-management.io/v1alpha1
kind: DynamicScoringConfig
metadata: {name: dynamic-scoring-config, namespace: open-cluster-management}
spec: {}
`} {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		gvr := dsf.ScorersResource
		if u.GetKind() == dsf.KindConfig {
			gvr = dsf.ConfigsResource
		}
		created, err := dyn.Resource(gvr).Namespace(u.GetNamespace()).Create(ctx, &u, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if gvr == dsf.ScorersResource { // as the hub's status writer writes it
			created.Object["status"] = map[string]any{"healthStatus": "Active"}
			if _, err := dyn.Resource(gvr).Namespace(u.GetNamespace()).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	var sent atomic.Int64
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		sent.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer gateway.Close()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := hub.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	// The agent listens on a non-loopback address of this machine: an Endpoints address may not be
	// a loopback one.
	ip, err := proc.HostIP()
	if err != nil {
		t.Fatal(err)
	}
	agent := startFunctionOn(t, dir, "dsf-bridge", ip, "CLUSTER=cluster1", "HUB_KUBECONFIG="+kubeconfig,
		"HUB_TOKEN_ADDON=scoreflow-dsf-agent", "SINK_TOKEN_FILE="+filepath.Join(dir, "token"), "K_SINK="+gateway.URL, "SECRETS_NAMESPACE="+dsfAgentNS)
	port, _ := strconv.Atoi(agent.url[strings.LastIndex(agent.url, ":")+1:])

	// The addon's Service and the agent's pod as the template makes them; the endpoints the
	// endpoints controller would write, at the local agent's port.
	if _, err := hub.Kube.CoreV1().Services(dsfAgentNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "scoreflow-dsf-agent-7d9f8b6c5d-x2x9z", Namespace: dsfAgentNS, Labels: dep.Spec.Template.Labels},
		Spec: *dep.Spec.Template.Spec.DeepCopy()}
	pod.Spec.ImagePullSecrets, pod.Spec.Containers[0].Image = nil, "dsf-bridge"
	created, err := hub.Kube.CoreV1().Pods(dsfAgentNS).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	if _, err := hub.Kube.CoreV1().Pods(dsfAgentNS).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	//nolint:staticcheck // Endpoints: what the Prometheus Operator's default discovery role reads.
	if _, err := hub.Kube.CoreV1().Endpoints(dsfAgentNS).Create(ctx, &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: dsfAgentNS, Labels: svc.Labels},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: ip, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod.Name, Namespace: dsfAgentNS}}},
			Ports:     []corev1.EndpointPort{{Name: svc.Spec.Ports[0].Name, Port: int32(port)}},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	for name, data := range map[string][]byte{"ca.crt": hub.Config.CAData, "client.crt": hub.Config.CertData, "client.key": hub.Config.KeyData} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sd := fmt.Sprintf("    api_server: %s\n    tls_config: {ca_file: %s, cert_file: %s, key_file: %s}",
		hub.Config.Host, filepath.Join(dir, "ca.crt"), filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key"))
	scrape, err := sm.ScrapeConfigs(sd)
	if err != nil {
		t.Fatalf("%s: %v", dsfServiceMonitorFile, err)
	}
	// DSF's interval, 15s, would make the test wait that long for a first scrape.
	scrape = strings.ReplaceAll(scrape, "scrape_interval: "+sm.Spec.Endpoints[0].Interval, "scrape_interval: 1s")
	ps, err := promserver.RunTool(tools.PrometheusKubernetesSD, "scrape_configs:\n"+scrape)
	if err != nil {
		t.Fatalf("%v\nthe rendered configuration:\n%s", err, scrape)
	}
	t.Cleanup(ps.Stop)

	var result []struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	}
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		resp, err := http.Get(ps.URL + "/api/v1/query?query=" + url.QueryEscape(dsfDashboardQuery))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Data struct {
				Result json.RawMessage `json:"result"`
			} `json:"data"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		_ = resp.Body.Close()
		_ = json.Unmarshal(out.Data.Result, &result)
		if len(result) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("DSF's dashboard query %s returned nothing; targets %+v\nprometheus output:\n%s", dsfDashboardQuery, activeTargets(t, ps.URL), ps.Output())
		}
	}
	// The sample scorer's score of a pod is the mean of its CPU rate: 2.5 and 4.5 cores, raw.
	v, _ := strconv.ParseFloat(fmt.Sprint(result[0].Value[1]), 64)
	if len(result) != 1 || result[0].Metric["ds_cluster"] != "cluster1" || math.Abs(v-7) > 1e-6 {
		t.Errorf("%s = %+v, want {ds_cluster=cluster1} 7", dsfDashboardQuery, result)
	}
	targets := activeTargets(t, ps.URL)
	if len(targets) != 1 || targets[0].Labels["job"] != svc.Name || targets[0].Labels["namespace"] != dsfAgentNS || targets[0].Labels["pod"] != pod.Name {
		t.Errorf("active targets %+v, want the agent's pod, job %s", targets, svc.Name)
	}
	if n := sent.Load(); n != 0 {
		t.Errorf("scoreDestination None, yet the agent sent %d events", n)
	}
}

// dsfAgentObjects are the metrics Service and the Deployment the DSF addon's template carries.
func dsfAgentObjects(t *testing.T) (*corev1.Service, *appsv1.Deployment) {
	t.Helper()
	items, err := manifests.Build(filepath.Join("..", "addon", "dsf"))
	if err != nil {
		t.Fatal(err)
	}
	var svc *corev1.Service
	var dep *appsv1.Deployment
	for _, it := range items {
		if it.Object.GetKind() != "AddOnTemplate" {
			continue
		}
		ms, _, _ := unstructured.NestedSlice(it.Object.Object, "spec", "agentSpec", "workload", "manifests")
		for _, m := range ms {
			b, _ := json.Marshal(m)
			switch m.(map[string]any)["kind"] {
			case "Service":
				svc = &corev1.Service{}
				if err := json.Unmarshal(b, svc); err != nil {
					t.Fatal(err)
				}
			case "Deployment":
				dep = &appsv1.Deployment{}
				if err := json.Unmarshal(b, dep); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if svc == nil || dep == nil {
		t.Fatal("addon/dsf's AddOnTemplate has no metrics Service or no Deployment")
	}
	return svc, dep
}
