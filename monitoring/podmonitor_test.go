package monitoring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	netcfg "knative.dev/networking/pkg/config"
	"knative.dev/pkg/logging"
	apiconfig "knative.dev/serving/pkg/apis/config"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	"knative.dev/serving/pkg/deployment"
	"knative.dev/serving/pkg/observability"
	cfgresources "knative.dev/serving/pkg/reconciler/configuration/resources"
	revconfig "knative.dev/serving/pkg/reconciler/revision/config"
	revresources "knative.dev/serving/pkg/reconciler/revision/resources"
	svcresources "knative.dev/serving/pkg/reconciler/service/resources"
	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/harness/promserver"
	"github.com/scoreflow/scoreflow/tools"
)

const podMonitorFile = "podmonitor.yaml"

// podMonitor is the part of the Prometheus Operator's PodMonitor (monitoring.coreos.com/v1) that
// monitoring/podmonitor.yaml uses; decoding is strict, so a field it does not model fails the test.
type podMonitor struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// loadPodMonitors are the PodMonitors of monitoring/podmonitor.yaml: the functions' (Knative
// Services) first, then the sources' (Deployments).
func loadPodMonitors(t *testing.T) []podMonitor {
	t.Helper()
	raw, err := os.ReadFile(podMonitorFile)
	if err != nil {
		t.Fatal(err)
	}
	var out []podMonitor
	for i, doc := range strings.Split(string(raw), "\n---\n") {
		var pm podMonitor
		if err := yaml.UnmarshalStrict([]byte(doc), &pm); err != nil {
			t.Fatalf("%s document %d: %v", podMonitorFile, i+1, err)
		}
		if pm.APIVersion != "monitoring.coreos.com/v1" || pm.Kind != "PodMonitor" || len(pm.Spec.PodMetricsEndpoints) == 0 {
			t.Fatalf("%s document %d is a %s %s with %d endpoints", podMonitorFile, i+1, pm.APIVersion, pm.Kind, len(pm.Spec.PodMetricsEndpoints))
		}
		out = append(out, pm)
	}
	if len(out) != 2 {
		t.Fatalf("%s has %d PodMonitors, want 2 (functions, sources)", podMonitorFile, len(out))
	}
	return out
}

// loadPodMonitor is the functions' PodMonitor, the one that selects Knative Serving's pods.
func loadPodMonitor(t *testing.T) podMonitor { return loadPodMonitors(t)[0] }

// operatorScrapeConfigs are the scrape_configs the Prometheus Operator renders from pm, one job per
// endpoint, as its configuration generator does (prometheus-operator pkg/prometheus/promcfg.go,
// generatePodMonitorConfig; golden file PodMonitorObjectWithMatchLabelSelector.golden): Kubernetes
// pod discovery in the selected namespaces with the selector as a server-side label selector,
// pods that have finished dropped, the endpoint's port kept by name, namespace, container, pod,
// job and endpoint labels, and hash-mod sharding (one shard here). sd is added to the discovery:
// the API server and its credentials, which in a cluster come from Prometheus's ServiceAccount.
func operatorScrapeConfigs(t *testing.T, pm podMonitor, sd string) string {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
	if err != nil {
		t.Fatalf("%s selector: %v", podMonitorFile, err)
	}
	var b strings.Builder
	for i, ep := range pm.Spec.PodMetricsEndpoints {
		names, _ := json.Marshal(pm.Spec.NamespaceSelector.MatchNames)
		fmt.Fprintf(&b, `- job_name: podMonitor/%[1]s/%[2]s/%[3]d
  honor_labels: false
  kubernetes_sd_configs:
  - role: pod
    namespaces:
      names: %[4]s
    selectors:
    - role: pod
      label: %[5]q
%[6]s
  scrape_interval: %[7]s
  metrics_path: %[8]s
  relabel_configs:
  - source_labels: [job]
    target_label: __tmp_prometheus_job_name
  - action: drop
    source_labels: [__meta_kubernetes_pod_phase]
    regex: (Failed|Succeeded)
  - action: keep
    source_labels: [__meta_kubernetes_pod_container_port_name]
    regex: %[9]s
  - source_labels: [__meta_kubernetes_namespace]
    target_label: namespace
  - source_labels: [__meta_kubernetes_pod_container_name]
    target_label: container
  - source_labels: [__meta_kubernetes_pod_name]
    target_label: pod
  - target_label: job
    replacement: %[1]s/%[2]s
  - target_label: endpoint
    replacement: %[9]s
  - source_labels: [__address__, __tmp_hash]
    target_label: __tmp_hash
    regex: (.+);
    replacement: $1
    action: replace
  - source_labels: [__tmp_hash]
    target_label: __tmp_hash
    modulus: 1
    action: hashmod
  - source_labels: [__tmp_hash, __tmp_disable_sharding]
    regex: 0;|.+;.+
    action: keep
`, pm.Metadata.Namespace, pm.Metadata.Name, i, names, sel.String(), sd, ep.Interval, ep.Path, ep.Port)
	}
	return b.String()
}

// servingPods are the pod templates Knative Serving makes for the Services of config/default,
// by Service name: each Service through Serving's own code (its Configuration, first Revision and
// that Revision's Deployment, knative.dev/serving v0.50.0 pkg/reconciler), so the labels and
// ports are the ones a cluster's pods carry.
func servingPods(t *testing.T) (map[string]corev1.PodTemplateSpec, map[string]bool) {
	t.Helper()
	built, err := manifests.Build(filepath.Join("..", "config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := manifests.Decode(built)
	if err != nil {
		t.Fatal(err)
	}
	defaults, err := apiconfig.NewDefaultsConfigFromMap(nil)
	if err != nil {
		t.Fatal(err)
	}
	features, err := apiconfig.NewFeaturesConfigFromMap(nil)
	if err != nil {
		t.Fatal(err)
	}
	dep, err := deployment.NewConfigFromMap(map[string]string{"queue-sidecar-image": "queue-proxy"})
	if err != nil {
		t.Fatal(err)
	}
	logCfg, err := logging.NewConfigFromMap(nil)
	if err != nil {
		t.Fatal(err)
	}
	network, err := netcfg.NewConfigFromMap(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &revconfig.Config{Config: &apiconfig.Config{Defaults: defaults, Features: features}, Deployment: dep,
		Logging: logCfg, Network: network, Observability: observability.DefaultConfig()}
	ctx := revconfig.ToContext(apiconfig.ToContext(context.Background(), cfg.Config), cfg)
	pods := map[string]corev1.PodTemplateSpec{}
	functions := map[string]bool{}
	for _, it := range set.Services {
		svc := it.Object.DeepCopy()
		svc.SetDefaults(ctx)
		conf := svcresources.MakeConfiguration(svc)
		rev := cfgresources.MakeRevision(ctx, conf, time.Now())
		rev.Name = conf.Name + "-00001"
		rev.SetDefaults(ctx)
		d, err := revresources.MakeDeployment(rev, cfg)
		if err != nil {
			t.Fatalf("Serving makes no Deployment of %s: %v", svc.Name, err)
		}
		pods[svc.Name] = d.Spec.Template
		functions[svc.Name] = strings.HasPrefix(svc.Spec.Template.Spec.Containers[0].Image, "ko://")
	}
	return pods, functions
}

// sourcePods are the pod templates of config/default's Deployments (the sources), by name, and
// whether each runs a function of this repository.
func sourcePods(t *testing.T) (map[string]corev1.PodTemplateSpec, map[string]bool) {
	t.Helper()
	built, err := manifests.Build(filepath.Join("..", "config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := manifests.Decode(built)
	if err != nil {
		t.Fatal(err)
	}
	pods, functions := map[string]corev1.PodTemplateSpec{}, map[string]bool{}
	for _, it := range set.Deployments {
		d := it.Object
		pods[d.Name] = d.Spec.Template
		functions[d.Name] = strings.HasPrefix(d.Spec.Template.Spec.Containers[0].Image, "ko://")
	}
	return pods, functions
}

// TestPodMonitorSelectsEveryFunction: exactly one PodMonitor selects the pods of every function of
// deploy/ (those Knative Serving makes of its Services, and the sources' Deployments' as written)
// and none selects anything else (cloudevents-player has no /metrics), in the namespace they run
// in, and the selecting one's port is the function's own container port.
func TestPodMonitorSelectsEveryFunction(t *testing.T) {
	pms := loadPodMonitors(t)
	sels := make([]labels.Selector, len(pms))
	for i, pm := range pms {
		sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		sels[i] = sel
		if got := strings.Join(pm.Spec.NamespaceSelector.MatchNames, ","); got != "scoreflow" || pm.Metadata.Namespace != "scoreflow" {
			t.Errorf("%s: %s watches namespaces %s from %s, want scoreflow", podMonitorFile, pm.Metadata.Name, got, pm.Metadata.Namespace)
		}
	}
	pods, functions := servingPods(t)
	sources, sourceFunctions := sourcePods(t)
	if len(sources) == 0 {
		t.Fatal("config/default has no Deployment: the sources' PodMonitor checks nothing")
	}
	for name, pod := range sources {
		pods[name], functions[name] = pod, sourceFunctions[name]
	}
	n := 0
	for name, pod := range pods {
		var by []podMonitor
		for i, sel := range sels {
			if sel.Matches(labels.Set(pod.Labels)) {
				by = append(by, pms[i])
			}
		}
		want := 0
		if functions[name] {
			want = 1
		}
		if len(by) != want {
			t.Errorf("%s: %d PodMonitors select the pods of %s, want %d (labels %v)", podMonitorFile, len(by), name, want, pod.Labels)
		}
		if !functions[name] || len(by) != 1 {
			continue
		}
		n++
		for _, ep := range by[0].Spec.PodMetricsEndpoints {
			var in []string
			for _, c := range pod.Spec.Containers {
				for _, p := range c.Ports {
					if p.Name == ep.Port {
						in = append(in, c.Name)
					}
				}
			}
			if len(in) != 1 || in[0] != pod.Spec.Containers[0].Name {
				t.Errorf("%s: port %s is in containers %v of %s's pods, want only the function's %s", podMonitorFile, ep.Port, in, name, pod.Spec.Containers[0].Name)
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d functions in config/default", n)
	}
}

// TestPodMonitorScrapesARealFunction loads the scrape configuration the Prometheus Operator renders
// from the PodMonitor into the real Prometheus (with its Kubernetes discovery, against a local hub),
// creates pods as Knative Serving makes them, the static-scorer's pointing at the real
// static-scorer binary, and checks that Prometheus discovers exactly that pod's function port and
// scrapes its metrics, labelled with its namespace, pod and container; the queue-proxy's ports,
// cloudevents-player's pod and a static-scorer pod in another namespace are not scraped.
func TestPodMonitorScrapesARealFunction(t *testing.T) {
	if _, err := tools.Path(tools.PrometheusKubernetesSD); err != nil {
		t.Fatal(err)
	}
	pm := loadPodMonitor(t)
	pods, _ := servingPods(t)
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	table := filepath.Join(dir, "table.yaml")
	if err := os.WriteFile(table, []byte("resources:\n  - {name: performance, value: performance, normalize: {method: minmax}}\nrows:\n  - {cluster: cluster1, app: app01, device: gpu0, performance: 90}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fn := startFunction(t, dir, "static-scorer", "TABLE="+table)
	port := fn.url[strings.LastIndex(fn.url, ":")+1:]

	// A pod as Serving makes it, its function's port where the local process listens (on a
	// cluster every function listens on 8080 of its own pod address).
	addPod := func(namespace, service, name string) {
		t.Helper()
		tmpl, ok := pods[service]
		if !ok {
			t.Fatalf("config/default has no Service %s", service)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: tmpl.Labels}, Spec: *tmpl.Spec.DeepCopy()}
		for i, p := range pod.Spec.Containers[0].Ports {
			if p.Name == servingv1.UserPortName {
				fmt.Sscan(port, &pod.Spec.Containers[0].Ports[i].ContainerPort)
			}
		}
		if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
		created, err := hub.Kube.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("pod %s/%s: %v", namespace, name, err)
		}
		created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}}}
		if _, err := hub.Kube.CoreV1().Pods(namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("pod %s/%s status: %v", namespace, name, err)
		}
	}
	addPod("scoreflow", "static-scorer", "static-scorer-00001-deployment-5d8f7c9b4-x2x7q")
	addPod("scoreflow", "cloudevents-player", "cloudevents-player-00001-deployment-7c9d5b8f6-k4r2m")
	addPod("elsewhere", "static-scorer", "static-scorer-00001-deployment-5d8f7c9b4-a1b2c")

	for name, data := range map[string][]byte{"ca.crt": hub.Config.CAData, "client.crt": hub.Config.CertData, "client.key": hub.Config.KeyData} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sd := fmt.Sprintf("    api_server: %s\n    tls_config: {ca_file: %s, cert_file: %s, key_file: %s}",
		hub.Config.Host, filepath.Join(dir, "ca.crt"), filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key"))
	scrape := operatorScrapeConfigs(t, pm, sd)
	// The PodMonitor's interval, 30s, would make the test wait up to that long for a first scrape.
	scrape = strings.ReplaceAll(scrape, "scrape_interval: "+pm.Spec.PodMetricsEndpoints[0].Interval, "scrape_interval: 1s")
	prom, err := promserver.RunTool(tools.PrometheusKubernetesSD, "scrape_configs:\n"+scrape)
	if err != nil {
		t.Fatalf("%v\nthe rendered configuration:\n%s", err, scrape)
	}
	t.Cleanup(prom.Stop)

	job := pm.Metadata.Namespace + "/" + pm.Metadata.Name
	var active []target
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
		active = activeTargets(t, prom.URL)
		if len(active) == 1 && active[0].Health == "up" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("active targets %+v, want the static-scorer's pod, up\nprometheus output:\n%s", active, prom.Output())
		}
	}
	want := map[string]string{"job": job, "namespace": "scoreflow", "pod": "static-scorer-00001-deployment-5d8f7c9b4-x2x7q",
		"container": "static-scorer", "endpoint": servingv1.UserPortName, "instance": "127.0.0.1:" + port}
	for k, v := range want {
		if active[0].Labels[k] != v {
			t.Errorf("target label %s = %q, want %q (all: %v)", k, active[0].Labels[k], v, active[0].Labels)
		}
	}
	// The function's own metrics arrive under the target's labels.
	q := fmt.Sprintf(`scoreflow_build_info{job=%q,pod=%q,container="static-scorer"}`, job, want["pod"])
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		resp, err := http.Get(prom.URL + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Data struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		_ = resp.Body.Close()
		if len(out.Data.Result) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d series", q, len(out.Data.Result))
		}
	}
}

type target struct {
	Labels           map[string]string `json:"labels"`
	DiscoveredLabels map[string]string `json:"discoveredLabels"`
	Health           string            `json:"health"`
	LastError        string            `json:"lastError"`
}

// activeTargets are Prometheus's active targets, sorted by pod.
func activeTargets(t *testing.T, base string) []target {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/targets?state=active")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Data struct {
			ActiveTargets []target `json:"activeTargets"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	sort.Slice(out.Data.ActiveTargets, func(i, j int) bool {
		return out.Data.ActiveTargets[i].Labels["pod"] < out.Data.ActiveTargets[j].Labels["pod"]
	})
	return out.Data.ActiveTargets
}
