package agentgateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/dsf"
	"github.com/scoreflow/scoreflow/pkg/hubtoken"
)

const (
	dsfAddon  = "scoreflow-dsf-agent"
	latencyCM = "latency-config"
	// within is how soon a change of the hub's objects must apply at the gateway.
	within = 10 * time.Second
)

// fromHub is a table whose resources all come from the hub: the latency agents' from their
// AddOnTemplate's configuration, the DSF agents' from the DynamicScorers.
var fromHub = &Table{Agents: []Agent{
	{Addon: addon, Types: []string{contract.TypeScoreUpdated}, ResourcesFrom: &ResourcesFrom{AddOnTemplate: addon,
		LatencyConfig: &ConfigMapKey{ConfigMap: latencyCM, Key: "config.yaml"}}},
	{Addon: dsfAddon, Types: []string{contract.TypeScoreUpdated}, ResourcesFrom: &ResourcesFrom{AddOnTemplate: dsfAddon, DynamicScorers: true}},
}}

// TestResourcesFollowTheHubsObjects: with resourcesFrom, what an agent may score is what the hub's
// objects say, as they change, with no restart: the resource of the latency agents' AddOnTemplate's
// configuration (and no other), and for the DSF agents the resource of each DynamicScorer in the
// namespace their AddOnTemplate lets them read, admitted within seconds of its creation and
// refused again within seconds of its deletion; scoreDestination None produces nothing, a
// DynamicScorer of another namespace nothing; with configSyncMode Full the name the hub synced from
// the scorer's /config is the one admitted. Each refusal says why.
func TestResourcesFollowTheHubsObjects(t *testing.T) {
	h := startGateway(t, Options{Table: fromHub})
	ctx := t.Context()
	installDSFCRDs(t, h)
	for _, ns := range []string{"open-cluster-management", "dynamic-scoring", "elsewhere"} {
		if _, err := h.hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.addons.AddonV1alpha1().ManagedClusterAddOns("cluster1").Create(ctx, &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: dsfAddon, Namespace: "cluster1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	latencyAgent := h.token(t, "cluster1", addon, hubtoken.Audience, time.Hour)
	dsfAgent := h.token(t, "cluster1", dsfAddon, hubtoken.Audience, time.Hour)

	// No AddOnTemplates: nothing to admit.
	h.expect(t, latencyAgent, "latency", http.StatusForbidden, "no AddOnTemplate "+addon+" on the hub")
	h.expect(t, dsfAgent, "acme-cpu", http.StatusForbidden, "no AddOnTemplate "+dsfAddon+" on the hub")

	// The latency agents' resource is their configuration's.
	templates := h.addons.AddonV1alpha1().AddOnTemplates()
	created, err := templates.Create(ctx, latencyTemplate(t, "latency"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("latency admitted %s after its AddOnTemplate was created", h.waitFor(t, latencyAgent, "latency", http.StatusAccepted))
	h.expect(t, latencyAgent, "cpu-idle", http.StatusForbidden, `configures resource \"latency\"`)
	edited := latencyTemplate(t, "latency-eu")
	edited.ResourceVersion = created.ResourceVersion
	if _, err := templates.Update(ctx, edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("latency-eu admitted %s after the AddOnTemplate's configuration named it", h.waitFor(t, latencyAgent, "latency-eu", http.StatusAccepted))
	h.expect(t, latencyAgent, "latency", http.StatusForbidden, `configures resource \"latency-eu\"`)

	// The DSF agents': the DynamicScorers' of the namespace their template names.
	if _, err := templates.Create(ctx, dsfTemplate("open-cluster-management"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, dsfAgent, "acme-cpu", http.StatusForbidden, "no DynamicScorer in namespace open-cluster-management produces it")
	scorers := dynamic.NewForConfigOrDie(h.hub.Config).Resource(dsf.ScorersResource)
	// Created first, so that once acme's resource is admitted the gateway has seen these too.
	createScorer(t, scorers, "open-cluster-management", "acme-power", dsf.SyncNone, dsf.DestinationNone, "acme_power")
	createScorer(t, scorers, "elsewhere", "other", dsf.SyncNone, dsf.DestinationAPS, "other_score")
	createScorer(t, scorers, "open-cluster-management", "acme", dsf.SyncNone, dsf.DestinationAPS, "acme_cpu")
	t.Logf("acme-cpu admitted %s after its DynamicScorer was created", h.waitFor(t, dsfAgent, "acme-cpu", http.StatusAccepted))
	h.expect(t, dsfAgent, "acme-power", http.StatusForbidden, "no DynamicScorer in namespace open-cluster-management produces it")
	h.expect(t, dsfAgent, "other-score", http.StatusForbidden, "no DynamicScorer in namespace open-cluster-management produces it")
	h.expect(t, latencyAgent, "acme-cpu", http.StatusForbidden, "configures resource")

	// configSyncMode Full: the name the hub synced from the scorer's /config (DSF's sample names
	// its score nowhere else).
	sample := createScorer(t, scorers, "open-cluster-management", "sample-scorer", dsf.SyncFull, dsf.DestinationAPS, "")
	h.waitFor(t, dsfAgent, "sample-my-score", http.StatusForbidden, "no DynamicScorer")
	if err := unstructured.SetNestedField(sample.Object, map[string]any{"healthStatus": dsf.HealthActive,
		"lastSyncedConfig": map[string]any{"name": "s", "description": "", "source": map[string]any{"path": "", "params": map[string]any{"query": "", "range": int64(0), "step": int64(0)}},
			"scoring": map[string]any{"path": "/scoring", "params": map[string]any{"name": "sample_my_score", "interval": int64(30)}}}}, "status"); err != nil {
		t.Fatal(err)
	}
	if _, err := scorers.Namespace("open-cluster-management").UpdateStatus(ctx, sample, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("sample-my-score admitted %s after the status synced its /config", h.waitFor(t, dsfAgent, "sample-my-score", http.StatusAccepted))

	if err := scorers.Namespace("open-cluster-management").Delete(ctx, "acme", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("acme-cpu refused %s after its DynamicScorer was deleted", h.waitFor(t, dsfAgent, "acme-cpu", http.StatusForbidden, "no DynamicScorer"))

	// The template moves its agents to another namespace: its DynamicScorers count, the old
	// namespace's no more.
	createScorer(t, scorers, "dynamic-scoring", "acme", dsf.SyncNone, dsf.DestinationAPS, "acme_ds")
	moved, err := templates.Get(ctx, dsfAddon, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	moved.Spec.Registration[0].KubeClient.HubPermissions[1].SingleNamespace.Namespace = "dynamic-scoring"
	if _, err := templates.Update(ctx, moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, dsfAgent, "acme-ds", http.StatusAccepted)
	h.expect(t, dsfAgent, "sample-my-score", http.StatusForbidden, "no DynamicScorer in namespace dynamic-scoring produces it")

	if err := templates.Delete(ctx, dsfAddon, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, dsfAgent, "acme-ds", http.StatusForbidden, "no AddOnTemplate "+dsfAddon+" on the hub")
	// Every event admitted reaches the broker, and nothing else: waiting for a refusal admits the
	// events posted before the gateway saw the change.
	if n, want := len(h.broker.Take()), h.accepted.Load(); int64(n) != want || want < 5 {
		t.Errorf("%d events forwarded, want the %d admitted (at least 5)", n, want)
	}
}

// TestResourcesWithoutDSFInstalled: a hub that does not serve DynamicScorers (no DSF CRDs) while
// the DSF agents' AddOnTemplate exists does not keep the gateway from being ready or the latency
// agents from being admitted; the DSF agents' resources are refused saying why, and admitted once
// the CRDs are installed and a DynamicScorer produces them.
func TestResourcesWithoutDSFInstalled(t *testing.T) {
	h := startGateway(t, Options{Table: fromHub})
	ctx := t.Context()
	templates := h.addons.AddonV1alpha1().AddOnTemplates()
	for _, tpl := range []*addonv1alpha1.AddOnTemplate{latencyTemplate(t, "latency"), dsfTemplate("open-cluster-management")} {
		if _, err := templates.Create(ctx, tpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.addons.AddonV1alpha1().ManagedClusterAddOns("cluster1").Create(ctx, &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: dsfAddon, Namespace: "cluster1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	latencyAgent := h.token(t, "cluster1", addon, hubtoken.Audience, time.Hour)
	dsfAgent := h.token(t, "cluster1", dsfAddon, hubtoken.Audience, time.Hour)
	h.waitFor(t, latencyAgent, "latency", http.StatusAccepted)
	h.waitFor(t, dsfAgent, "acme-cpu", http.StatusForbidden, "no DynamicScorer of namespace open-cluster-management can be read")

	// A second gateway started now, with the same table, is ready all the same.
	g, err := New(h.hub.Config, nil, Options{Table: fromHub}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	g.Start(ctx)
	began := time.Now()
	for g.Ready() != nil {
		if time.Since(began) > within {
			t.Fatalf("not ready %s after it started: %v", within, g.Ready())
		}
		time.Sleep(50 * time.Millisecond)
	}

	installDSFCRDs(t, h)
	if _, err := h.hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "open-cluster-management"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createScorer(t, dynamic.NewForConfigOrDie(h.hub.Config).Resource(dsf.ScorersResource), "open-cluster-management", "acme", dsf.SyncNone, dsf.DestinationAPS, "acme_cpu")
	// The informer lists again after its backoff (0.8 s, doubling, at most 30 s).
	deadline := time.Now().Add(45 * time.Second)
	for {
		st, body := h.post(t, dsfAgent, scores("acme-cpu", "cluster1"))
		if st == http.StatusAccepted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acme-cpu after the CRDs were installed: %d %s", st, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// expect posts agent's scores of resource for cluster1 and checks the answer's status, and that
// its reason's message says why.
func (h *gatewayHub) expect(t *testing.T, token, resource string, status int, why string) {
	t.Helper()
	if st, body := h.post(t, token, scores(resource, "cluster1")); st != status || !strings.Contains(body, why) {
		t.Errorf("%s: %d %s; want %d saying %q", resource, st, body, status, why)
	}
}

// waitFor posts agent's scores of resource for cluster1 until the answer is status (and says why,
// when given), for at most within, and returns how long that took.
func (h *gatewayHub) waitFor(t *testing.T, token, resource string, status int, why ...string) time.Duration {
	t.Helper()
	began := time.Now()
	for {
		st, body := h.post(t, token, scores(resource, "cluster1"))
		if st == status && (len(why) == 0 || strings.Contains(body, why[0])) {
			return time.Since(began).Round(time.Millisecond)
		}
		if time.Since(began) > within {
			t.Fatalf("%s: %d %s after %s, want %d", resource, st, body, within, status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func installDSFCRDs(t *testing.T, h *gatewayHub) {
	t.Helper()
	if _, err := envtest.InstallCRDs(h.hub.Config, envtest.CRDInstallOptions{Paths: []string{"../../addon/dsf/crds"}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
}

// latencyTemplate is a latency agent's AddOnTemplate whose configuration scores resource.
func latencyTemplate(t *testing.T, resource string) *addonv1alpha1.AddOnTemplate {
	t.Helper()
	cm, err := json.Marshal(corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: latencyCM, Namespace: "agents"},
		Data:       map[string]string{"config.yaml": "resource: " + resource + "\nlatencies:\n  - name: registry\n    url: https://quay.io/\n"}})
	if err != nil {
		t.Fatal(err)
	}
	// Another ConfigMap, of another name, naming another resource: not the agent's configuration.
	other := strings.ReplaceAll(strings.ReplaceAll(string(cm), latencyCM, "unrelated"), "resource: "+resource, "resource: unrelated")
	return &addonv1alpha1.AddOnTemplate{ObjectMeta: metav1.ObjectMeta{Name: addon},
		Spec: addonv1alpha1.AddOnTemplateSpec{AddonName: addon, AgentSpec: workload(`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"a","namespace":"agents"}}`, other, string(cm))}}
}

// dsfTemplate is a DSF agent's AddOnTemplate whose agents read the DynamicScorers of namespace.
func dsfTemplate(namespace string) *addonv1alpha1.AddOnTemplate {
	return &addonv1alpha1.AddOnTemplate{ObjectMeta: metav1.ObjectMeta{Name: dsfAddon},
		Spec: addonv1alpha1.AddOnTemplateSpec{AddonName: dsfAddon,
			AgentSpec: workload(`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"a","namespace":"agents"}}`),
			Registration: []addonv1alpha1.RegistrationSpec{{Type: addonv1alpha1.RegistrationTypeKubeClient, KubeClient: &addonv1alpha1.KubeClientRegistrationConfig{
				HubPermissions: []addonv1alpha1.HubPermissionConfig{
					{Type: addonv1alpha1.HubPermissionsBindingCurrentCluster, CurrentCluster: &addonv1alpha1.CurrentClusterBindingConfig{ClusterRoleName: dsfAddon}},
					{Type: addonv1alpha1.HubPermissionsBindingSingleNamespace, SingleNamespace: &addonv1alpha1.SingleNamespaceBindingConfig{
						Namespace: namespace, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: dsfAddon}}},
				}}}}}}
}

// workload is an agent spec of these manifests (JSON).
func workload(manifests ...string) workv1.ManifestWorkSpec {
	var ms []workv1.Manifest
	for _, m := range manifests {
		ms = append(ms, workv1.Manifest{RawExtension: runtime.RawExtension{Raw: []byte(m)}})
	}
	return workv1.ManifestWorkSpec{Workload: workv1.ManifestsTemplate{Manifests: ms}}
}

// createScorer creates a DynamicScorer scoring name ("" for none: its /config names it).
func createScorer(t *testing.T, scorers dynamic.NamespaceableResourceInterface, namespace, object, sync, destination, name string) *unstructured.Unstructured {
	t.Helper()
	scoring := map[string]any{"path": "/scoring"}
	if name != "" {
		scoring["params"] = map[string]any{"name": name, "interval": int64(60)}
	}
	u, err := scorers.Namespace(namespace).Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": dsf.Group + "/" + dsf.Version, "kind": dsf.KindScorer, "metadata": map[string]any{"name": object},
		"spec": map[string]any{"description": "d", "configURL": "http://acme.example:8000/config", "configSyncMode": sync, "location": "External",
			"scoreDestination": destination, "source": map[string]any{"type": "None"}, "scoring": scoring},
	}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return u
}
