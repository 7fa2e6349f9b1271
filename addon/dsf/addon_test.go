package dsf_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonclient "open-cluster-management.io/api/client/addon/clientset/versioned"
	workclient "open-cluster-management.io/api/client/work/clientset/versioned"
	clusterv1beta2 "open-cluster-management.io/api/cluster/v1beta2"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/scoreflow/scoreflow/harness/addontest"
	"github.com/scoreflow/scoreflow/harness/dsfupstream"
	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/harness/proc"
	"github.com/scoreflow/scoreflow/harness/promserver"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

const (
	addonName  = "scoreflow-dsf-agent"
	agentNS    = "dynamic-scoring"
	scorersNS  = "open-cluster-management"
	gatewayURL = "http://agent-gateway.scoreflow.svc.cluster.local"
	audience   = "scoreflow/agent-gateway"
)

// TestDSFAddonRunsAnyScorer runs OCM's real addon manager and placement controller on a local hub
// with this directory's manifests applied (kustomize, server-side, strict against the CRDs), DSF's
// published sample DynamicScorer and DynamicScoringConfig applied unchanged, and a DynamicScorer of
// a scorer nobody tuned scoreflow for (its own name, host, Secret name and key). The status writer
// runs as its Deployment describes, with its ServiceAccount's identity, and writes both scorers
// Active. Enabling the addon for cluster1 renders a ManifestWork carrying the agent with cluster1's
// name, the gateway, DSF's metrics Service, the service CA and the pull secret, in DSF's agent
// namespace (created if missing, never deleted). The agent's hub identity reads DynamicScorers in
// open-cluster-management, mints its own gateway token and nothing else; on the managed cluster (a
// second API server with the ManifestWork applied) its ServiceAccount may get a Secret of its
// namespace by name and nothing else. The agent the ManifestWork describes then runs with those two
// identities against a real Prometheus standing in for cluster1's and DSF's own sample scorer: it
// sends cluster1's scores of both scorers, the second with the token from the Secret the spec
// names. Disabling removes the ManifestWork; install-by-placement then enables the addon on every
// cluster of the global set.
func TestDSFAddonRunsAnyScorer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	hub := startHub(ctx, t)
	for _, c := range []string{"cluster1", "cluster2"} {
		if err := hub.AddCluster(ctx, c, nil); err != nil {
			t.Fatal(err)
		}
		if err := hub.AcceptCluster(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	logFile := addontest.ControllerLog(t, 8000, "missing content for CA bundle")
	gc, err := hub.StartGarbageCollector(ctx, logFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gc.Stop)
	pc, err := hub.StartPlacementController(logFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Stop() })
	am, err := hub.StartAddonManager(logFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(am.Stop)

	applier, err := knlocal.NewApplier(hub.Config)
	if err != nil {
		t.Fatal(err)
	}
	built := build(t, ".")
	if err := applier.Apply(ctx, built...); err != nil {
		t.Fatal(err)
	}
	// DSF's published sample and masks, applied as DSF's guide says.
	for _, f := range []string{"mydynamicscorer-sample.yaml", "mydynamicscoringconfig.yaml"} {
		objs, err := knlocal.ReadFiles(dsfupstream.Spec(t, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			o.SetNamespace(scorersNS)
		}
		if err := applier.Apply(ctx, objs...); err != nil {
			t.Fatal(err)
		}
	}
	// A scorer of its own: DSF's sample scorer behind a proxy that records what arrives, at an
	// address written in the spec itself, with a token from a Secret and key of its own naming.
	sample := dsfupstream.Scorer(t, "sample-scorer")
	acme := newRecorder(t, sample)
	acmeSpec, err := knlocal.ReadFiles(writeSpec(t, fmt.Sprintf(`apiVersion: dynamic-scoring.open-cluster-management.io/v1alpha1
kind: DynamicScorer
metadata: {name: acme-cpu, namespace: %s}
spec:
  description: acme's CPU scorer
  configURL: %s/config
  configSyncMode: None
  location: External
  scoreDestination: AddOnPlacementScore
  scoreDimensionFormat: "${pod}"
  source:
    type: Prometheus
    host: http://kube-prometheus-kube-prome-prometheus.monitoring.svc:9090
    path: /api/v1/query_range
    params: {query: 'sum by (pod) (rate(container_cpu_usage_seconds_total[1m]))', range: 600, step: 60}
  scoring:
    path: /scoring
    params: {name: acme_cpu, interval: 30}
    auth: {tokenSecretRef: {name: acme-credentials, key: api-token}}
`, scorersNS, acme.URL)))
	if err != nil {
		t.Fatal(err)
	}
	if err := applier.Apply(ctx, acmeSpec...); err != nil {
		t.Fatal(err)
	}
	runStatusWriter(ctx, t, hub, built, "http://<NodeIP>:30007="+sample)

	addons := addonclient.NewForConfigOrDie(hub.Config)
	works := workclient.NewForConfigOrDie(hub.Config)
	// `clusteradm addon enable --names scoreflow-dsf-agent --clusters cluster1`.
	if _, err := addons.AddonV1alpha1().ManagedClusterAddOns("cluster1").Create(ctx, &addonv1alpha1.ManagedClusterAddOn{
		ObjectMeta: metav1.ObjectMeta{Name: addonName, Namespace: "cluster1"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	work := addontest.WaitWork(ctx, t, works, addonName, "cluster1")
	dep := checkWork(t, work, "cluster1")
	checkHubPermissions(ctx, t, hub.Config, "cluster1", scorersNS)
	managed := applyOnManagedCluster(ctx, t, work)
	if _, err := managed.Kube.CoreV1().Secrets(agentNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "acme-credentials"},
		StringData: map[string]string{"api-token": "acme-t0ken"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	checkManagedPermissions(ctx, t, managed)
	runAgent(ctx, t, hub, managed, dep, "cluster1", sample, acme)

	// `clusteradm addon disable`: the ManifestWork goes (garbage-collected with its owner).
	if err := addons.AddonV1alpha1().ManagedClusterAddOns("cluster1").Delete(ctx, addonName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	addontest.WaitFor(ctx, t, "the agent's ManifestWork removed", func() (bool, string) {
		got, err := addontest.Works(ctx, works, addonName, "cluster1")
		return err == nil && len(got) == 0, fmt.Sprintf("%d works, %v", len(got), err)
	})

	// install-by-placement: every cluster of the global set (OCM creates it, selecting every
	// cluster) gets the agent, without a ManagedClusterAddOn created by hand.
	if _, err := hub.Cluster.ClusterV1beta2().ManagedClusterSets().Create(ctx, &clusterv1beta2.ManagedClusterSet{
		ObjectMeta: metav1.ObjectMeta{Name: "global"},
		Spec:       clusterv1beta2.ManagedClusterSetSpec{ClusterSelector: clusterv1beta2.ManagedClusterSelector{SelectorType: clusterv1beta2.LabelSelector, LabelSelector: &metav1.LabelSelector{}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := applier.Apply(ctx, build(t, "install-by-placement")...); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"cluster1", "cluster2"} {
		checkWork(t, addontest.WaitWork(ctx, t, works, addonName, c), c)
	}
	if exited, err := am.Exited(); exited {
		t.Errorf("the addon manager exited: %v", err)
	}
}

// TestNamespaceVariant: namespace-dynamic-scoring moves everything that names the DynamicScorers'
// namespace to dynamic-scoring (DSF's kustomize install's): the addon manager binds the agent's
// hub Role there, the agent, the status writer and the agent gateway read there, and nothing names
// open-cluster-management as the scorers' namespace any more.
func TestNamespaceVariant(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	hub := startHub(ctx, t)
	if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dynamic-scoring"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	applier := withCluster1AndAddonManager(ctx, t, hub)
	built := build(t, "namespace-dynamic-scoring")
	if err := applier.Apply(ctx, built...); err != nil {
		t.Fatal(err)
	}
	for _, o := range built {
		switch o.GetKind() {
		case "Deployment":
			if env := containerEnv(t, o)["SCORERS_NAMESPACE"]; env != "dynamic-scoring" {
				t.Errorf("%s: SCORERS_NAMESPACE %q", o.GetName(), env)
			}
		case "Role", "RoleBinding":
			if ns := o.GetNamespace(); ns == scorersNS {
				t.Errorf("%s %s is still in %s", o.GetKind(), o.GetName(), ns)
			}
		}
	}
	addons := addonclient.NewForConfigOrDie(hub.Config)
	if _, err := addons.AddonV1alpha1().ManagedClusterAddOns("cluster1").Create(ctx, &addonv1alpha1.ManagedClusterAddOn{
		ObjectMeta: metav1.ObjectMeta{Name: addonName, Namespace: "cluster1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dep := checkWork(t, addontest.WaitWork(ctx, t, workclient.NewForConfigOrDie(hub.Config), addonName, "cluster1"), "cluster1")
	if env := envOf(t, dep.Spec.Template.Spec.Containers[0]); env["SCORERS_NAMESPACE"] != "dynamic-scoring" {
		t.Errorf("the agent reads %q, want dynamic-scoring", env["SCORERS_NAMESPACE"])
	}
	checkHubPermissions(ctx, t, hub.Config, "cluster1", "dynamic-scoring")
	status := kubernetes.NewForConfigOrDie(impersonateSA(hub.Config, "scoreflow", "dsf-status"))
	gateway := kubernetes.NewForConfigOrDie(impersonateSA(hub.Config, "scoreflow", "agent-gateway"))
	for ns, want := range map[string]bool{"dynamic-scoring": true, scorersNS: false} {
		if got := allowed(ctx, t, status, authzv1.ResourceAttributes{Namespace: ns, Group: dsfGroup, Resource: "dynamicscorers", Subresource: "status", Verb: "update"}); got != want {
			t.Errorf("the status writer may update statuses in %s: %v, want %v", ns, got, want)
		}
		for _, verb := range []string{"list", "watch"} {
			if got := allowed(ctx, t, gateway, authzv1.ResourceAttributes{Namespace: ns, Group: dsfGroup, Resource: "dynamicscorers", Verb: verb}); got != want {
				t.Errorf("the agent gateway may %s DynamicScorers in %s: %v, want %v", verb, ns, got, want)
			}
		}
	}
}

// TestServiceMonitorVariant: with-servicemonitor adds DSF's ServiceMonitor to what the addon
// distributes, and nothing else: the addon manager renders it into the agent's ManifestWork in the
// agent's namespace, the very object of monitoring/managed-cluster (DSF's own), selecting the
// metrics Service of the same ManifestWork by its label and port. The base distributes none.
func TestServiceMonitorVariant(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	base, variant := build(t, "."), build(t, "with-servicemonitor")
	for _, objs := range [][]*unstructured.Unstructured{base, variant} {
		for _, o := range objs {
			if o.GetKind() == "ServiceMonitor" {
				t.Errorf("a ServiceMonitor to apply on the hub: %s", o.GetName())
			}
		}
	}
	if n := len(templateManifests(t, variant)) - len(templateManifests(t, base)); n != 1 {
		t.Errorf("the variant's template has %d manifests more than the base's, want 1", n)
	}
	hub := startHub(ctx, t)
	applier := withCluster1AndAddonManager(ctx, t, hub)
	if err := applier.Apply(ctx, variant...); err != nil {
		t.Fatal(err)
	}
	if _, err := addonclient.NewForConfigOrDie(hub.Config).AddonV1alpha1().ManagedClusterAddOns("cluster1").Create(ctx, &addonv1alpha1.ManagedClusterAddOn{
		ObjectMeta: metav1.ObjectMeta{Name: addonName, Namespace: "cluster1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	work := addontest.WaitWork(ctx, t, workclient.NewForConfigOrDie(hub.Config), addonName, "cluster1")
	dep := checkWork(t, work, "cluster1")
	var sm, svc map[string]any
	for _, m := range work.Spec.Workload.Manifests {
		var o map[string]any
		if err := json.Unmarshal(m.Raw, &o); err != nil {
			t.Fatal(err)
		}
		switch o["kind"] {
		case "ServiceMonitor":
			sm = o
		case "Service":
			svc = o
		}
	}
	if sm == nil {
		t.Fatal("the ManifestWork carries no ServiceMonitor")
	}
	shipped, err := knlocal.ReadFiles("../../monitoring/managed-cluster/dsf-agent-servicemonitor.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(sm), fmt.Sprint(shipped[0].Object); got != want {
		t.Errorf("the distributed ServiceMonitor\n%s\nis not DSF's\n%s", got, want)
	}
	selector, _, _ := unstructured.NestedStringMap(sm, "spec", "selector", "matchLabels")
	svcLabels, _, _ := unstructured.NestedStringMap(svc, "metadata", "labels")
	ports, _, _ := unstructured.NestedSlice(svc, "spec", "ports")
	endpoints, _, _ := unstructured.NestedSlice(sm, "spec", "endpoints")
	namespaces, _, _ := unstructured.NestedStringSlice(sm, "spec", "namespaceSelector", "matchNames")
	if !labels.SelectorFromSet(selector).Matches(labels.Set(svcLabels)) || len(ports) != 1 || len(endpoints) != 1 ||
		ports[0].(map[string]any)["name"] != endpoints[0].(map[string]any)["port"] || !slices.Equal(namespaces, []string{dep.Namespace}) {
		t.Errorf("the ServiceMonitor %v does not select the metrics Service %v in %s", sm["spec"], svc, dep.Namespace)
	}
}

// templateManifests are the manifests of the AddOnTemplate among objs.
func templateManifests(t *testing.T, objs []*unstructured.Unstructured) []any {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "AddOnTemplate" {
			ms, _, _ := unstructured.NestedSlice(o.Object, "spec", "agentSpec", "workload", "manifests")
			return ms
		}
	}
	t.Fatal("no AddOnTemplate")
	return nil
}

// startHub runs a local hub with the addon CRDs, scoreflow's DSF CRDs and the namespaces the
// manifests use.
func startHub(ctx context.Context, t *testing.T) *localhub.Hub {
	t.Helper()
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	if err := hub.InstallAddonCRDs(); err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(hub.Config, envtest.CRDInstallOptions{Paths: []string{"crds"}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"open-cluster-management-hub", "scoreflow", scorersNS, "elsewhere"} {
		if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	return hub
}

// build is the kustomization dir as `kubectl kustomize` builds it.
func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	items, err := manifests.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, it := range items {
		out = append(out, it.Object)
	}
	return out
}

func writeSpec(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkWork asserts the ManifestWork carries the agent configured for cluster and returns its
// Deployment.
func checkWork(t *testing.T, work *workv1.ManifestWork, cluster string) *appsv1.Deployment {
	t.Helper()
	var dep *appsv1.Deployment
	var svc *corev1.Service
	kinds := map[string]bool{}
	for _, m := range work.Spec.Workload.Manifests {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name        string            `json:"name"`
				Namespace   string            `json:"namespace"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(m.Raw, &meta); err != nil {
			t.Fatal(err)
		}
		kinds[meta.Kind] = true
		switch {
		case meta.Kind == "Namespace":
			if meta.Metadata.Name != agentNS || meta.Metadata.Labels["addon.open-cluster-management.io/namespace"] != "true" {
				t.Errorf("Namespace %s labelled %v, want %s labelled for OCM's pull secret", meta.Metadata.Name, meta.Metadata.Labels, agentNS)
			}
		case meta.Metadata.Namespace != agentNS:
			t.Errorf("%s in namespace %q, want %q", meta.Kind, meta.Metadata.Namespace, agentNS)
		}
		switch meta.Kind {
		case "Deployment":
			dep = &appsv1.Deployment{}
			if err := json.Unmarshal(m.Raw, dep); err != nil {
				t.Fatal(err)
			}
		case "Service":
			svc = &corev1.Service{}
			if err := json.Unmarshal(m.Raw, svc); err != nil {
				t.Fatal(err)
			}
		case "ConfigMap":
			if meta.Metadata.Name != "service-ca" || meta.Metadata.Annotations["service.beta.openshift.io/inject-cabundle"] != "true" {
				t.Errorf("ConfigMap %s annotated %v, want service-ca for OpenShift's CA", meta.Metadata.Name, meta.Metadata.Annotations)
			}
		}
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Service", "Deployment"} {
		if !kinds[k] {
			t.Errorf("ManifestWork has no %s (has %v)", k, kinds)
		}
	}
	// Disabling the addon leaves DSF's namespace, and the user's Secrets in it, in place; the
	// service CA the operator injects is never reverted.
	orphaned := false
	if do := work.Spec.DeleteOption; do != nil && do.SelectivelyOrphan != nil {
		for _, r := range do.SelectivelyOrphan.OrphaningRules {
			orphaned = orphaned || (r.Resource == "namespaces" && r.Name == agentNS)
		}
	}
	if !orphaned {
		t.Errorf("namespace %s would be deleted with the addon: delete option %+v", agentNS, work.Spec.DeleteOption)
	}
	createOnly := false
	for _, mc := range work.Spec.ManifestConfigs {
		createOnly = createOnly || (mc.ResourceIdentifier.Resource == "configmaps" && mc.ResourceIdentifier.Name == "service-ca" &&
			mc.ResourceIdentifier.Namespace == agentNS && mc.UpdateStrategy != nil && mc.UpdateStrategy.Type == workv1.UpdateStrategyTypeCreateOnly)
	}
	if !createOnly {
		t.Errorf("the service-ca ConfigMap is not created once (CreateOnly): %+v", work.Spec.ManifestConfigs)
	}
	if dep == nil || svc == nil {
		t.FailNow()
	}
	pod := dep.Spec.Template
	c := pod.Spec.Containers[0]
	env := envOf(t, c)
	for k, v := range map[string]string{
		"CLUSTER":           cluster,
		"K_SINK":            gatewayURL,
		"ENDPOINTS":         "",
		"HUB_KUBECONFIG":    "/managed/hub-kubeconfig/kubeconfig",
		"HUB_TOKEN_ADDON":   addonName,
		"SINK_TOKEN_FILE":   "/var/run/scoreflow/hub-token/token",
		"SECRETS_NAMESPACE": "fieldRef:metadata.namespace",
		"CA_FILE":           "/var/run/secrets/openshift/service-ca/service-ca.crt",
	} {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	if _, ok := env["TOKEN_DIR"]; ok {
		t.Error("the agent still reads mounted token files (TOKEN_DIR)")
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	caMounted := false
	for _, v := range pod.Spec.Volumes {
		caMounted = caMounted || (v.ConfigMap != nil && v.ConfigMap.Name == "service-ca" && v.ConfigMap.Optional != nil && *v.ConfigMap.Optional &&
			mounts[v.Name] == filepath.Dir(env["CA_FILE"]))
	}
	if !caMounted {
		t.Errorf("the service-ca ConfigMap is not mounted (optional) where CA_FILE is: %+v", pod.Spec.Volumes)
	}
	if len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != "open-cluster-management-image-pull-credentials" {
		t.Errorf("imagePullSecrets %+v, want OCM's pull credentials (IMAGE_PULL_SECRET's default)", pod.Spec.ImagePullSecrets)
	}
	if pod.Spec.AutomountServiceAccountToken == nil || !*pod.Spec.AutomountServiceAccountToken {
		t.Error("the agent has no token for its cluster's API: it reads the Secrets the specs name there")
	}
	// DSF's metrics Service: DSF's name, label and port, selecting the agent's pods on its port.
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	if svc.Name != "dynamic-scoring-agent-service" || svc.Labels["app"] != "dynamic-scoring-agent" || !sel.Matches(labels.Set(pod.Labels)) ||
		len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "http-metrics" || svc.Spec.Ports[0].Port != 8080 || svc.Spec.Ports[0].TargetPort.StrVal != c.Ports[0].Name || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("metrics Service %s %v selecting %v, ports %+v; the pod's labels %v and ports %+v", svc.Name, svc.Labels, svc.Spec.Selector, svc.Spec.Ports, pod.Labels, c.Ports)
	}
	return dep
}

// envOf is a container's environment; a value from the downward API is "fieldRef:<path>".
// envOf is c's environment by name. It fails t when a name is set twice: the API server keeps the
// last and warns, and an apply may drop either.
func envOf(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		if _, twice := env[e.Name]; twice {
			t.Errorf("container %s sets %s twice", c.Name, e.Name)
		}
		env[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
		}
	}
	return env
}

func containerEnv(t *testing.T, o *unstructured.Unstructured) map[string]string {
	t.Helper()
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
		t.Fatal(err)
	}
	return envOf(t, d.Spec.Template.Spec.Containers[0])
}

const dsfGroup = "dynamic-scoring.open-cluster-management.io"

func allowed(ctx context.Context, t *testing.T, c kubernetes.Interface, ra authzv1.ResourceAttributes) bool {
	t.Helper()
	r, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{
		Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status.Allowed
}

// impersonateSA is cfg acting as ServiceAccount namespace/name.
func impersonateSA(cfg *rest.Config, namespace, name string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + namespace + ":" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}}
	return c
}

// checkHubPermissions asserts what the addon manager binds to cluster's agent: read the
// DynamicScorers where they are (scorers), mint its own gateway token; nothing else.
func checkHubPermissions(ctx context.Context, t *testing.T, cfg *rest.Config, cluster, scorers string) {
	t.Helper()
	agent := kubernetes.NewForConfigOrDie(addontest.Impersonating(cfg, addonName, cluster))
	can := func(ra authzv1.ResourceAttributes) bool { return allowed(ctx, t, agent, ra) }
	granted := []authzv1.ResourceAttributes{
		{Namespace: scorers, Group: dsfGroup, Resource: "dynamicscorers", Verb: "list"},
		{Namespace: scorers, Group: dsfGroup, Resource: "dynamicscorers", Verb: "watch"},
		{Namespace: scorers, Group: dsfGroup, Resource: "dynamicscoringconfigs", Verb: "watch"},
		{Namespace: cluster, Resource: "serviceaccounts", Subresource: "token", Verb: "create", Name: addonName},
		{Namespace: cluster, Group: "addon.open-cluster-management.io", Resource: "managedclusteraddons", Verb: "get", Name: addonName},
	}
	addontest.WaitFor(ctx, t, cluster+"'s agent's hub permissions bound", func() (bool, string) {
		for _, ra := range granted {
			if !can(ra) {
				return false, fmt.Sprintf("may not %s %s in %s", ra.Verb, ra.Resource, ra.Namespace)
			}
		}
		return true, ""
	})
	for _, ra := range []authzv1.ResourceAttributes{
		{Namespace: scorers, Group: dsfGroup, Resource: "dynamicscorers", Verb: "update"},
		{Namespace: scorers, Group: dsfGroup, Resource: "dynamicscorers", Subresource: "status", Verb: "update"},
		{Namespace: "elsewhere", Group: dsfGroup, Resource: "dynamicscorers", Verb: "list"},
		{Namespace: scorers, Resource: "secrets", Verb: "get"},
		{Namespace: "cluster2", Resource: "serviceaccounts", Subresource: "token", Verb: "create", Name: addonName},
		{Namespace: cluster, Resource: "serviceaccounts", Subresource: "token", Verb: "create", Name: "scoreflow-latency-agent"},
		{Namespace: cluster, Group: "cluster.open-cluster-management.io", Resource: "addonplacementscores", Verb: "create"},
		{Namespace: cluster, Group: "work.open-cluster-management.io", Resource: "manifestworks", Verb: "list"},
	} {
		if can(ra) {
			t.Errorf("%s's agent may %s %s/%s %s in %q: more than it needs", cluster, ra.Verb, ra.Resource, ra.Subresource, ra.Name, ra.Namespace)
		}
	}
}

// applyOnManagedCluster runs a second API server standing in for the managed cluster and creates
// the ManifestWork's manifests there, in order, as the klusterlet's work agent does (with create
// and update, not server-side apply: the addon manager adds HUB_KUBECONFIG beside the template's).
func applyOnManagedCluster(ctx context.Context, t *testing.T, work *workv1.ManifestWork) *localhub.Hub {
	t.Helper()
	managed, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = managed.Stop() })
	dyn := dynamic.NewForConfigOrDie(managed.Config)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(managed.Kube.Discovery()))
	var objs []*unstructured.Unstructured
	for _, m := range work.Spec.Workload.Manifests {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(m.Raw); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, u)
	}
	// Namespaces first, as the work agent retries the rest until they exist.
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		return map[bool]int{true: 0, false: 1}[a.GetKind() == "Namespace"] - map[bool]int{true: 0, false: 1}[b.GetKind() == "Namespace"]
	})
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatal(err)
		}
		var r dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if ns := u.GetNamespace(); ns != "" {
			r = dyn.Resource(mapping.Resource).Namespace(ns)
		}
		if _, err := r.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s %s on the managed cluster: %v", gvk.Kind, u.GetName(), err)
		}
	}
	return managed
}

// checkManagedPermissions asserts what the agent's ServiceAccount may do on its managed cluster:
// get a Secret of its namespace by name, any name (the specs name them); nothing else: no list or
// watch of Secrets, no Secret elsewhere, no write.
func checkManagedPermissions(ctx context.Context, t *testing.T, managed *localhub.Hub) {
	t.Helper()
	sa := kubernetes.NewForConfigOrDie(impersonateSA(managed.Config, agentNS, addonName))
	for _, name := range []string{"acme-credentials", "api-auth-secret", "any-name"} {
		if !allowed(ctx, t, sa, authzv1.ResourceAttributes{Namespace: agentNS, Resource: "secrets", Verb: "get", Name: name}) {
			t.Errorf("the agent may not get Secret %s/%s", agentNS, name)
		}
	}
	for _, ra := range []authzv1.ResourceAttributes{
		{Namespace: agentNS, Resource: "secrets", Verb: "list"},
		{Namespace: agentNS, Resource: "secrets", Verb: "watch"},
		{Namespace: agentNS, Resource: "secrets", Verb: "create"},
		{Namespace: agentNS, Resource: "secrets", Verb: "update", Name: "acme-credentials"},
		{Namespace: "kube-system", Resource: "secrets", Verb: "get", Name: "acme-credentials"},
		{Namespace: "monitoring", Resource: "secrets", Verb: "get", Name: "prometheus-token"},
		{Namespace: agentNS, Resource: "configmaps", Verb: "get", Name: "service-ca"},
		{Namespace: agentNS, Resource: "pods", Verb: "list"},
		{Namespace: agentNS, Group: "rbac.authorization.k8s.io", Resource: "roles", Verb: "update", Name: "scoreflow-dsf-agent-secrets"},
	} {
		if allowed(ctx, t, sa, ra) {
			t.Errorf("the agent may %s %s %s in %q on its cluster: more than it needs", ra.Verb, ra.Resource, ra.Name, ra.Namespace)
		}
	}
}

// runStatusWriter runs the status writer as its Deployment in built describes, with its
// ServiceAccount's identity, until the test ends, and waits until it has written every
// DynamicScorer Active. endpoints is where the hub reaches the specs' placeholder hosts.
func runStatusWriter(ctx context.Context, t *testing.T, hub *localhub.Hub, built []*unstructured.Unstructured, endpoints string) {
	t.Helper()
	var env map[string]string
	for _, o := range built {
		if o.GetKind() == "Deployment" && o.GetName() == "dsf-status" {
			env = containerEnv(t, o)
		}
	}
	if env == nil {
		t.Fatal("no Deployment dsf-status")
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	writeImpersonating(t, hub.Config, kubeconfig, "system:serviceaccount:scoreflow:dsf-status",
		[]string{"system:serviceaccounts", "system:serviceaccounts:scoreflow", "system:authenticated"})
	vars := []string{"PATH=" + os.Getenv("PATH"), "PORT=0", "ADDRESS=127.0.0.1", "KUBECONFIG=" + kubeconfig}
	for k, v := range env {
		switch k {
		case "ENDPOINTS":
			v = endpoints
		case "POD_NAMESPACE":
			v = "scoreflow" // the downward API's
		}
		vars = append(vars, k+"="+v)
	}
	bin := buildBinary(t, "dsf-status")
	checkReads(t, bin, env, "POD_NAMESPACE")
	p, err := proc.Start(proc.Spec{Name: "dsf-status", Path: bin, Env: vars, Out: addontest.Log{T: t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	dyn := dynamic.NewForConfigOrDie(hub.Config)
	addontest.WaitFor(ctx, t, "every DynamicScorer Active", func() (bool, string) {
		l, err := dyn.Resource(schema.GroupVersionResource{Group: dsfGroup, Version: "v1alpha1", Resource: "dynamicscorers"}).Namespace(scorersNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var states []string
		ok := len(l.Items) > 0
		for _, u := range l.Items {
			h, _, _ := unstructured.NestedString(u.Object, "status", "healthStatus")
			states = append(states, u.GetName()+"="+h)
			ok = ok && h == "Active"
		}
		return ok, strings.Join(states, " ")
	})
}

func writeImpersonating(t *testing.T, cfg *rest.Config, path, user string, groups []string) {
	t.Helper()
	if err := localhub.WriteKubeconfig(rest.CopyConfig(cfg), path); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range kc.AuthInfos {
		ai.Impersonate, ai.ImpersonateGroups = user, groups
	}
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
}

func buildBinary(t *testing.T, fn string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), fn)
	if out, err := exec.Command("go", "build", "-o", bin, "../../functions/"+fn).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// checkReads fails the test for a variable env sets that the binary does not read (its --help
// names every variable it reads); except lists variables read otherwise.
func checkReads(t *testing.T, bin string, env map[string]string, except ...string) {
	t.Helper()
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	for k := range env {
		if slices.Contains(except, k) || k == "CLUSTER_NAME" || k == "INSTALL_NAMESPACE" { // the addon manager's own, in every container
			continue
		}
		if !strings.Contains(string(help), "[env "+k+"]") && !strings.Contains(string(help), "$"+k) {
			t.Errorf("the manifests set %s, which %s does not read", k, filepath.Base(bin))
		}
	}
}

// recorder is a reverse proxy to a scorer that records the Authorization of each scoring call.
type recorder struct {
	URL  string
	mu   sync.Mutex
	auth []string
}

func newRecorder(t *testing.T, target string) *recorder {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/scoring" {
			r.mu.Lock()
			r.auth = append(r.auth, req.Header.Get("Authorization"))
			r.mu.Unlock()
		}
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *recorder) authorizations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.auth...)
}

// runAgent runs the agent dep describes, as the klusterlet would: the dsf-bridge binary with the
// Deployment's environment, the agent's hub identity and, on the managed cluster, its
// ServiceAccount's token; against a Prometheus standing in for the cluster's, DSF's own sample
// scorer behind the published spec's <NodeIP>:30007 and acme behind its own address, and a
// stand-in for the gateway. Every variable the template sets must be one the binary reads.
func runAgent(ctx context.Context, t *testing.T, hub, managed *localhub.Hub, dep *appsv1.Deployment, cluster, sample string, acme *recorder) {
	t.Helper()
	bin := buildBinary(t, "dsf-bridge")
	c := dep.Spec.Template.Spec.Containers[0]
	env := envOf(t, c)
	checkReads(t, bin, env)

	// cluster1's Prometheus: two pods using 2.5 and 4.5 cores, no cluster label.
	prom := promserver.Start(t)
	now := promserver.Aligned(time.Minute)
	var series []promserver.Series
	for i, rate := range []float64{2.5, 4.5} {
		series = append(series, promserver.Counter(map[string]string{"__name__": "container_cpu_usage_seconds_total", "node": "worker-1",
			"namespace": "shop", "pod": fmt.Sprintf("web-%d", i), "container": "web"}, rate, now))
	}
	prom.MustPush(t, series...)

	type arrival struct {
		auth string
		su   *contract.ScoreUpdated
		err  error
	}
	got := make(chan arrival, 20)
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e, err := binding.ToEvent(r.Context(), cehttp.NewMessageFromHttpRequest(r))
		var su *contract.ScoreUpdated
		if err == nil {
			su, err = contract.DecodeScoreUpdated(e)
		}
		got <- arrival{r.Header.Get("Authorization"), su, err}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer gateway.Close()

	root := t.TempDir()
	local := func(p string) string { return filepath.Join(root, p) }
	hubKubeconfig := local("/managed/hub-kubeconfig/kubeconfig")
	for _, d := range []string{filepath.Dir(hubKubeconfig), local("/var/run/scoreflow/hub-token")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeImpersonating(t, hub.Config, hubKubeconfig, addontest.AgentUser(addonName, cluster), addontest.AgentGroups(addonName, cluster))
	// The pod's own token on the managed cluster, as the kubelet mounts it.
	tr, err := managed.Kube.CoreV1().ServiceAccounts(agentNS).CreateToken(ctx, addonName, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	managedKubeconfig := local("managed.kubeconfig")
	if err := localhub.WriteKubeconfig(&rest.Config{Host: managed.Config.Host, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: managed.Config.CAData}}, managedKubeconfig); err != nil {
		t.Fatal(err)
	}

	vars := []string{"PATH=" + os.Getenv("PATH"), "PORT=0", "ADDRESS=127.0.0.1", "MANAGED_KUBECONFIG=" + managedKubeconfig}
	for k, v := range env {
		switch k {
		case "K_SINK":
			v = gateway.URL
		case "ENDPOINTS":
			// Only the published spec's placeholder and in-cluster names need a mapping here.
			v = strings.Join([]string{"http://kube-prometheus-kube-prome-prometheus.monitoring.svc:9090=" + prom.URL, "http://<NodeIP>:30007=" + sample}, ",")
		case "SECRETS_NAMESPACE":
			v = agentNS // the downward API's
		case "HUB_KUBECONFIG", "SINK_TOKEN_FILE", "CA_FILE":
			v = local(v)
		}
		vars = append(vars, k+"="+v)
	}
	p, err := proc.Start(proc.Spec{Name: "dsf-agent", Path: bin, Env: vars, Out: addontest.Log{T: t}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(5 * time.Second)
	want := map[string][]contract.Score{
		"sample-my-score": {{Name: "worker-1;shop;web-0", Value: 2}, {Name: "worker-1;shop;web-1", Value: 4}},
		"acme-cpu":        {{Name: "web-0", Value: 2}, {Name: "web-1", Value: 4}},
	}
	seen := map[string]bool{}
	deadline := time.After(90 * time.Second)
	for len(seen) < len(want) {
		select {
		case a := <-got:
			if a.err != nil {
				t.Fatalf("the agent sent no score.updated: %v", a.err)
			}
			if w, ok := want[a.su.Resource]; !ok || len(a.su.Items) != 1 || a.su.Items[0].Cluster != cluster || fmt.Sprint(a.su.Items[0].Scores) != fmt.Sprint(w) {
				t.Errorf("the agent sent %+v, want %s's %s %v", a.su, cluster, a.su.Resource, w)
			}
			seen[a.su.Resource] = true
			checkGatewayToken(ctx, t, hub, a.auth, cluster)
		case <-deadline:
			t.Fatalf("the agent sent %v within 90s, want %v", seen, want)
		}
	}
	if a := acme.authorizations(); len(a) == 0 || a[0] != "Bearer acme-t0ken" {
		t.Errorf("acme's scoring calls carried %q, want the token of Secret acme-credentials key api-token", a)
	}
}

// checkGatewayToken: the agent's token for the gateway is its own hub ServiceAccount's.
func checkGatewayToken(ctx context.Context, t *testing.T, hub *localhub.Hub, auth, cluster string) {
	t.Helper()
	token, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		t.Fatalf("the agent sent no bearer token (Authorization %q)", auth)
	}
	review, err := hub.Kube.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{audience}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "system:serviceaccount:" + cluster + ":" + addonName; !review.Status.Authenticated || review.Status.User.Username != want {
		t.Errorf("the agent's token authenticates as %q (%v, %s), want %s for the gateway's audience",
			review.Status.User.Username, review.Status.Authenticated, review.Status.Error, want)
	}
}

// withCluster1AndAddonManager accepts cluster1 on hub, runs OCM's addon manager until the test
// ends, and returns an applier for hub.
func withCluster1AndAddonManager(ctx context.Context, t *testing.T, hub *localhub.Hub) *knlocal.Applier {
	t.Helper()
	if err := hub.AddCluster(ctx, "cluster1", nil); err != nil {
		t.Fatal(err)
	}
	if err := hub.AcceptCluster(ctx, "cluster1"); err != nil {
		t.Fatal(err)
	}
	am, err := hub.StartAddonManager(addontest.ControllerLog(t, 8000, "missing content for CA bundle"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(am.Stop)
	applier, err := knlocal.NewApplier(hub.Config)
	if err != nil {
		t.Fatal(err)
	}
	return applier
}
