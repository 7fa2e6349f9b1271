package addon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/google/uuid"
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonclient "open-cluster-management.io/api/client/addon/clientset/versioned"
	workclient "open-cluster-management.io/api/client/work/clientset/versioned"
	workv1 "open-cluster-management.io/api/work/v1"

	"github.com/scoreflow/scoreflow/harness/addontest"
	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/proc"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/hubtoken"
)

const (
	addonName    = "scoreflow-latency-agent"
	installNS    = "open-cluster-management-agent-addon"
	gatewayURL   = "http://agent-gateway.scoreflow.svc.cluster.local"
	clusterSet   = "scoreflow"
	agentLabel   = "scoreflow.io/latency-agent"
	hubNamespace = "scoreflow"
)

// TestAddonInstallsAgent runs OCM's real addon manager (and placement controller) on a local hub
// with the manifests of this directory applied, and checks what enabling the addon does, for a
// cluster enabled by hand (as `clusteradm addon enable` does: a ManagedClusterAddOn) and, after
// switching to the Placements install strategy, for one chosen by its label: a ManifestWork in the
// cluster's namespace carries the agent with that cluster's name, the broker and its hub
// credentials; the agent's hub identity may mint tokens for the broker identity and nothing else;
// disabling removes the ManifestWork.
func TestAddonInstallsAgent(t *testing.T) {
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
	for _, ns := range []string{"open-cluster-management-hub", hubNamespace} {
		if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if err := hub.AddClusterSet(ctx, clusterSet, hubNamespace); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"cluster1", "cluster2"} {
		if err := hub.AddCluster(ctx, c, map[string]string{localhub.ClusterSetLabel: clusterSet}); err != nil {
			t.Fatal(err)
		}
		if err := hub.AcceptCluster(ctx, c); err != nil {
			t.Fatal(err)
		}
	}

	// Without a request-header CA on the local API server both controllers repeat that line.
	logFile := addontest.ControllerLog(t, 12000, "missing content for CA bundle")
	// Disabling the addon removes its ManifestWork through Kubernetes' garbage collector (the work
	// is owned by the ManagedClusterAddOn); started after the addon CRDs, so it watches them.
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
	objs, err := knlocal.ReadFiles(".")
	if err != nil {
		t.Fatal(err)
	}
	// Server-side apply validates every field against the CRDs' schemas: a misspelt field fails here.
	if err := applier.Apply(ctx, objs...); err != nil {
		t.Fatal(err)
	}
	// Another ServiceAccount in each cluster's namespace: the agent must not mint its tokens.
	for _, c := range []string{"cluster1", "cluster2"} {
		if _, err := hub.Kube.CoreV1().ServiceAccounts(c).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "score-writer"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	addons := addonclient.NewForConfigOrDie(hub.Config)
	works := workclient.NewForConfigOrDie(hub.Config)

	// Enabled by hand, as `clusteradm addon enable --names scoreflow-latency-agent --clusters
	// cluster1` does: a ManagedClusterAddOn in the cluster's namespace.
	_, err = addons.AddonV1alpha1().ManagedClusterAddOns("cluster1").Create(ctx, &addonv1alpha1.ManagedClusterAddOn{
		ObjectMeta: metav1.ObjectMeta{Name: addonName, Namespace: "cluster1"},
		Spec:       addonv1alpha1.ManagedClusterAddOnSpec{InstallNamespace: installNS},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkAgent(t, addontest.WaitWork(ctx, t, works, addonName, "cluster1"), "cluster1")
	checkHubPermissions(ctx, t, hub.Config, "cluster1", "cluster2")
	work1, err := addontest.Works(ctx, works, addonName, "cluster1")
	if err != nil || len(work1) != 1 {
		t.Fatalf("cluster1's ManifestWorks: %d, %v", len(work1), err)
	}
	gw := startGateway(t, hub)
	token := runAgent(ctx, t, hub, &work1[0], "cluster1", gw)
	checkGateway(ctx, t, hub, gw, token, "cluster1", "cluster2")
	// `clusteradm addon disable`: the ManifestWork goes, so the klusterlet removes the agent, and
	// the gateway refuses the agent's token.
	disableAndMeasure(ctx, t, hub, addons, works, gw, token, "cluster1")

	// The install strategy the CMA's comment describes: by the label, through the Placement.
	patch := `{"spec":{"installStrategy":{"type":"Placements","placements":[{"name":"scoreflow-latency-agent","namespace":"scoreflow"}]}}}`
	if _, err := addons.AddonV1alpha1().ClusterManagementAddOns().Patch(ctx, addonName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	setLabel(ctx, t, hub, "cluster2", true)
	checkAgent(t, addontest.WaitWork(ctx, t, works, addonName, "cluster2"), "cluster2")
	checkHubPermissions(ctx, t, hub.Config, "cluster2", "cluster1")
	if _, err := addons.AddonV1alpha1().ManagedClusterAddOns("cluster1").Get(ctx, addonName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("cluster1, unlabelled, has the addon enabled: %v", err)
	}
	setLabel(ctx, t, hub, "cluster2", false)
	waitDisabled(ctx, t, addons, works, "cluster2")
	if exited, err := am.Exited(); exited {
		t.Errorf("the addon manager exited: %v", err)
	}
	if exited, err := gc.Exited(); exited {
		t.Errorf("the garbage collector exited: %v", err)
	}
}

func setLabel(ctx context.Context, t *testing.T, hub *localhub.Hub, cluster string, on bool) {
	t.Helper()
	mc, err := hub.Cluster.ClusterV1().ManagedClusters().Get(ctx, cluster, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if on {
		mc.Labels[agentLabel] = "true"
	} else {
		delete(mc.Labels, agentLabel)
	}
	if _, err := hub.Cluster.ClusterV1().ManagedClusters().Update(ctx, mc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkHubPermissions asserts the template's hub permissions as the addon manager binds them to
// the agent of cluster (the user and groups of the client certificate the klusterlet obtains for
// it): in its cluster's namespace it may create its own hub ServiceAccount, owned by its
// ManagedClusterAddOn, and mint that ServiceAccount's tokens (pkg/hubtoken, as the agent does), and
// nothing else this test can think of, and nothing at all in another cluster's namespace.
func checkHubPermissions(ctx context.Context, t *testing.T, cfg *rest.Config, cluster, other string) {
	t.Helper()
	agent := kubernetes.NewForConfigOrDie(addontest.Impersonating(cfg, addonName, cluster))
	m := minter(t, cfg, cluster, cluster)
	addontest.WaitFor(ctx, t, cluster+"'s agent may mint its own token", func() (bool, string) {
		_, err := m.Refresh(ctx)
		return err == nil, fmt.Sprint(err)
	})
	tok, err := os.ReadFile(m.File)
	if err != nil || strings.Count(string(tok), ".") != 2 {
		t.Errorf("%s: the agent minted no JWT (%v)", cluster, err)
	}
	if _, err := minter(t, cfg, cluster, other).Refresh(ctx); !apierrors.IsForbidden(err) {
		t.Errorf("%s's agent minted in %s's namespace: %v", cluster, other, err)
	}
	if _, err := agent.CoreV1().ServiceAccounts(cluster).CreateToken(ctx, "score-writer", &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{hubtoken.Audience}}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("%s's agent minted a token for another ServiceAccount of its namespace: %v", cluster, err)
	}
	for _, ra := range []authzv1.ResourceAttributes{
		{Namespace: other, Resource: "serviceaccounts", Verb: "create"},
		{Namespace: other, Resource: "serviceaccounts", Subresource: "token", Verb: "create", Name: addonName},
		{Namespace: other, Group: "addon.open-cluster-management.io", Resource: "managedclusteraddons", Verb: "get", Name: addonName},
		{Namespace: hubNamespace, Resource: "serviceaccounts", Verb: "create"},
		{Namespace: cluster, Resource: "serviceaccounts", Verb: "get", Name: "score-writer"},
		{Namespace: cluster, Resource: "serviceaccounts", Verb: "list"},
		{Namespace: cluster, Resource: "serviceaccounts", Verb: "delete", Name: addonName},
		{Namespace: cluster, Resource: "serviceaccounts", Verb: "update", Name: addonName},
		{Namespace: cluster, Resource: "secrets", Verb: "list"},
		{Namespace: cluster, Group: "addon.open-cluster-management.io", Resource: "managedclusteraddons", Verb: "update", Name: addonName},
		{Namespace: cluster, Group: "addon.open-cluster-management.io", Resource: "managedclusteraddons", Verb: "list"},
		{Namespace: cluster, Group: "rbac.authorization.k8s.io", Resource: "rolebindings", Verb: "create"},
		{Namespace: hubNamespace, Group: "eventing.knative.dev", Resource: "brokers", Verb: "get"},
		{Namespace: cluster, Group: "cluster.open-cluster-management.io", Resource: "addonplacementscores", Verb: "create"},
		{Namespace: cluster, Group: "work.open-cluster-management.io", Resource: "manifestworks", Verb: "list"},
		{Group: "cluster.open-cluster-management.io", Resource: "managedclusters", Verb: "list"},
	} {
		r, err := agent.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{
			Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed {
			t.Errorf("%s's agent may %s %s/%s %s in %q: more than it needs", cluster, ra.Verb, ra.Resource, ra.Subresource, ra.Name, ra.Namespace)
		}
	}
}

// minter mints, as cluster's agent, the token of the hub ServiceAccount of the addon in namespace
// ns, as pkg/hubtoken does in the agent.
func minter(t *testing.T, cfg *rest.Config, cluster, ns string) *hubtoken.Minter {
	t.Helper()
	c := addontest.Impersonating(cfg, addonName, cluster)
	return &hubtoken.Minter{Client: kubernetes.NewForConfigOrDie(c), Metadata: metadata.NewForConfigOrDie(c), Cluster: ns, Addon: addonName,
		File: filepath.Join(t.TempDir(), "token")}
}

// checkAgent asserts the ManifestWork carries the agent Deployment configured for cluster.
func checkAgent(t *testing.T, work *workv1.ManifestWork, cluster string) {
	t.Helper()
	if want := "addon-" + addonName + "-deploy-0"; work.Name != want {
		t.Errorf("ManifestWork %s, want %s", work.Name, want)
	}
	var dep *appsv1.Deployment
	kinds := map[string]bool{}
	for _, m := range work.Spec.Workload.Manifests {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(m.Raw, &meta); err != nil {
			t.Fatal(err)
		}
		kinds[meta.Kind] = true
		if meta.Metadata.Namespace != "" && meta.Metadata.Namespace != installNS {
			t.Errorf("%s in namespace %q, want %q", meta.Kind, meta.Metadata.Namespace, installNS)
		}
		if meta.Kind == "Deployment" {
			dep = &appsv1.Deployment{}
			if err := json.Unmarshal(m.Raw, dep); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, k := range []string{"ServiceAccount", "ConfigMap", "Deployment"} {
		if !kinds[k] {
			t.Errorf("ManifestWork has no %s (has %v)", k, kinds)
		}
	}
	if dep == nil {
		t.FailNow()
	}
	c := dep.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		if _, twice := env[e.Name]; twice {
			t.Errorf("container %s sets %s twice: the API server keeps the last, an apply may drop either", c.Name, e.Name)
		}
		env[e.Name] = e.Value
	}
	want := map[string]string{
		"CLUSTER":         cluster,
		"K_SINK":          gatewayURL,
		"HUB_KUBECONFIG":  "/managed/hub-kubeconfig/kubeconfig",
		"HUB_TOKEN_ADDON": addonName,
		"SINK_TOKEN_FILE": "/var/run/scoreflow/hub-token/token",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	// The hub credentials: the Secret the klusterlet fills for this addon, mounted where
	// HUB_KUBECONFIG points.
	secret := ""
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == addonName+"-hub-kubeconfig" {
			secret = v.Name
		}
	}
	if secret == "" {
		t.Fatalf("no volume of Secret %s-hub-kubeconfig: %+v", addonName, dep.Spec.Template.Spec.Volumes)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.Name == secret && m.MountPath == "/managed/hub-kubeconfig" {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("hub kubeconfig Secret not mounted at /managed/hub-kubeconfig: %+v", c.VolumeMounts)
	}
}

// waitDisabled waits until cluster's ManagedClusterAddOn is gone and its ManifestWork with it, so
// the klusterlet removes the agent. The addon manager does not delete the work itself: the work's
// owner reference to the ManagedClusterAddOn makes Kubernetes' garbage collector delete it.
func waitDisabled(ctx context.Context, t *testing.T, addons addonclient.Interface, works workclient.Interface, cluster string) {
	t.Helper()
	addontest.WaitFor(ctx, t, "the addon disabled on "+cluster, func() (bool, string) {
		_, err := addons.AddonV1alpha1().ManagedClusterAddOns(cluster).Get(ctx, addonName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	addontest.WaitFor(ctx, t, "the agent's ManifestWork removed from "+cluster, func() (bool, string) {
		got, err := addontest.Works(ctx, works, addonName, cluster)
		var names []string
		for _, w := range got {
			for _, o := range w.OwnerReferences {
				w.Name += fmt.Sprintf(" owned by %s %s (uid %s)", o.Kind, o.Name, o.UID)
			}
			names = append(names, w.Name)
		}
		return err == nil && len(got) == 0, fmt.Sprintf("%v, %v", names, err)
	})
}

// gateway is the real agent gateway (functions/agent-gateway, with the table deploy/ gives it)
// running against the hub in front of a stand-in broker.
type gateway struct {
	url    string
	broker *functest.Sink
}

func startGateway(t *testing.T, hub *localhub.Hub) *gateway {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "agent-gateway")
	if out, err := exec.Command("go", "build", "-o", bin, "../functions/agent-gateway").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	objs, err := knlocal.ReadFiles("../deploy/agent-gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	table := ""
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" {
			table, _, _ = unstructured.NestedString(o.Object, "data", "agents.yaml")
		}
	}
	if !strings.Contains(table, addonName) {
		t.Fatalf("deploy/agent-gateway.yaml's table does not admit %s:\n%s", addonName, table)
	}
	agents := filepath.Join(dir, "agents.yaml")
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(agents, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := hub.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	port, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	broker := functest.NewSink(t, nil)
	p, err := proc.Start(proc.Spec{Name: "agent-gateway", Path: bin, Out: addontest.Log{T: t}, Env: []string{"PATH=" + os.Getenv("PATH"),
		fmt.Sprintf("PORT=%d", port), "ADDRESS=127.0.0.1", "KUBECONFIG=" + kubeconfig, "AGENTS_FILE=" + agents, "K_SINK=" + broker.URL}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	g := &gateway{url: fmt.Sprintf("http://127.0.0.1:%d", port), broker: broker}
	addontest.WaitFor(t.Context(), t, "the agent gateway ready", func() (bool, string) {
		resp, err := http.Get(g.url + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return g
}

// post sends cluster's latency score with token to the gateway and returns the status.
func (g *gateway) post(t *testing.T, token, cluster string) int {
	t.Helper()
	e := cloudevents.NewEvent()
	e.SetID(uuid.NewString())
	e.SetSource("scoreflow/latency-scorer/" + cluster)
	e.SetType(contract.TypeScoreUpdated)
	e.SetTime(time.Now())
	_ = e.SetData(cloudevents.ApplicationJSON, contract.ScoreUpdated{Resource: "latency",
		Items: []contract.ClusterScores{{Cluster: cluster, Scores: []contract.Score{{Name: "forged", Value: 100}}}}})
	req := functest.Request(t, g.url, e)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// runAgent runs the agent the ManifestWork of cluster describes, as the klusterlet would: the
// latency-scorer binary with the Deployment's environment, its ConfigMap and hub kubeconfig
// mounted (the kubeconfig acts as the agent's identity on the hub), measuring a local server and
// sending to the real gateway. It checks every variable the template sets is one the binary
// reads, that the agent's token authenticates as its own hub ServiceAccount for the gateway's
// audience, and that the gateway forwards its score of this cluster to the broker. It returns the
// token the agent minted.
func runAgent(ctx context.Context, t *testing.T, hub *localhub.Hub, work *workv1.ManifestWork, cluster string, gw *gateway) string {
	t.Helper()
	dep := deploymentOf(t, work)
	bin := filepath.Join(t.TempDir(), "latency-scorer")
	build := exec.Command("go", "build", "-o", bin, "../functions/latency-scorer")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	c := dep.Spec.Template.Spec.Containers[0]
	for _, e := range c.Env {
		// OCM's addon manager adds its built-in values to every container's environment.
		if e.Name == "CLUSTER_NAME" || e.Name == "INSTALL_NAMESPACE" {
			continue
		}
		// A flag's own variable ([env NAME]), or one it falls back to ($K_SINK).
		if !strings.Contains(string(help), "[env "+e.Name+"]") && !strings.Contains(string(help), "$"+e.Name) {
			t.Errorf("the template sets %s, which the latency-scorer does not read", e.Name)
		}
	}

	// What the klusterlet would mount, under a local root.
	root := t.TempDir()
	local := func(p string) string { return filepath.Join(root, p) }
	hubKubeconfig := local("/managed/hub-kubeconfig/kubeconfig")
	if err := os.MkdirAll(filepath.Dir(hubKubeconfig), 0o755); err != nil {
		t.Fatal(err)
	}
	agentCfg := rest.CopyConfig(hub.Config)
	if err := localhub.WriteKubeconfig(agentCfg, hubKubeconfig); err != nil {
		t.Fatal(err)
	}
	impersonate(t, hubKubeconfig, cluster)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer target.Close()
	config := local("/etc/scoreflow/latency/config.yaml")
	if err := os.MkdirAll(filepath.Dir(config), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, []byte("resource: latency\nlatencies:\n  - name: local\n    url: "+target.URL+"\n    runs: 1\nnormalize:\n  method: linear\n  min: 0\n  max: 1000\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	env := []string{"PATH=" + os.Getenv("PATH"), "PORT=0", "ADDRESS=127.0.0.1"}
	for _, e := range c.Env {
		v := e.Value
		switch e.Name {
		case "K_SINK":
			v = gw.url
		case "CONFIG_FILE", "HUB_KUBECONFIG", "SINK_TOKEN_FILE":
			v = local(v)
		}
		env = append(env, e.Name+"="+v)
	}
	if err := os.MkdirAll(local("/var/run/scoreflow/hub-token"), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := proc.Start(proc.Spec{Name: "latency-agent", Path: bin, Env: env, Out: addontest.Log{T: t}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(5 * time.Second)
	select {
	case e := <-gw.broker.Arrived():
		s, err := contract.DecodeScoreUpdated(&e)
		if err != nil || len(s.Items) != 1 || s.Items[0].Cluster != cluster || e.Source() != "/scoreflow/agents/"+addonName+"/"+cluster ||
			e.Extensions()[contract.ExtResource] != s.Resource {
			t.Errorf("the gateway forwarded %s from %s (%v), want %s's score from /scoreflow/agents/%s/%s with scoreflowresource", e.Data(), e.Source(), err, cluster, addonName, cluster)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("nothing reached the broker through the gateway within 60s")
	}
	token, err := os.ReadFile(local("/var/run/scoreflow/hub-token/token"))
	if err != nil {
		t.Fatal(err)
	}
	review, err := hub.Kube.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: string(token), Audiences: []string{hubtoken.Audience}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "system:serviceaccount:" + cluster + ":" + addonName; !review.Status.Authenticated || review.Status.User.Username != want {
		t.Errorf("the agent's token authenticates as %q (%v, %s), want %s for the gateway's audience",
			review.Status.User.Username, review.Status.Authenticated, review.Status.Error, want)
	}
	return string(token)
}

// checkGateway: with the token cluster's agent minted, the gateway takes its own cluster's score
// and refuses one naming other; a token the agent asks for two hours (its RBAC cannot stop that)
// is refused.
func checkGateway(ctx context.Context, t *testing.T, hub *localhub.Hub, gw *gateway, token, cluster, other string) {
	t.Helper()
	if st := gw.post(t, token, cluster); st != http.StatusAccepted {
		t.Errorf("%s's agent scoring %s: %d, want 202", cluster, cluster, st)
	}
	if st := gw.post(t, token, other); st != http.StatusForbidden {
		t.Errorf("%s's agent scoring %s: %d, want 403", cluster, other, st)
	}
	long := minter(t, hub.Config, cluster, cluster)
	long.Lifetime = 2 * time.Hour
	if _, err := long.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	twoHours, err := os.ReadFile(long.File)
	if err != nil {
		t.Fatal(err)
	}
	if st := gw.post(t, string(twoHours), cluster); st != http.StatusUnauthorized {
		t.Errorf("a two-hour token of %s's agent: %d, want 401", cluster, st)
	}
	for _, e := range gw.broker.Take() {
		if s, err := contract.DecodeScoreUpdated(&e); err != nil || s.Items[0].Cluster != cluster {
			t.Errorf("the broker got %s (%v): a refused event was forwarded", e.Data(), err)
		}
	}
}

// disableAndMeasure disables the addon for cluster and measures how long the gateway keeps
// taking the token its agent minted before: it must stop within a minute. Kubernetes' garbage
// collector then removes the agent's hub ServiceAccount, so the token no longer authenticates at
// all, and its RoleBinding, so the agent can mint no other.
func disableAndMeasure(ctx context.Context, t *testing.T, hub *localhub.Hub, addons addonclient.Interface, works workclient.Interface, gw *gateway, token, cluster string) {
	t.Helper()
	start := time.Now()
	if err := addons.AddonV1alpha1().ManagedClusterAddOns(cluster).Delete(ctx, addonName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var cut time.Duration
	addontest.WaitFor(ctx, t, cluster+"'s agent refused by the gateway", func() (bool, string) {
		st := gw.post(t, token, cluster)
		cut = time.Since(start)
		return st == http.StatusForbidden || st == http.StatusUnauthorized, fmt.Sprint(st)
	})
	t.Logf("after the addon was disabled for %s the gateway refused its agent's token within %s", cluster, cut.Round(time.Millisecond))
	if cut > time.Minute {
		t.Errorf("the gateway took %s to refuse a disabled agent, more than a minute", cut)
	}
	waitDisabled(ctx, t, addons, works, cluster)
	addontest.WaitFor(ctx, t, cluster+"'s hub ServiceAccount and RoleBinding garbage-collected", func() (bool, string) {
		_, errSA := hub.Kube.CoreV1().ServiceAccounts(cluster).Get(ctx, addonName, metav1.GetOptions{})
		rbs, errRB := hub.Kube.RbacV1().RoleBindings(cluster).List(ctx, metav1.ListOptions{LabelSelector: addonv1alpha1.AddonLabelKey + "=" + addonName})
		return apierrors.IsNotFound(errSA) && errRB == nil && len(rbs.Items) == 0, fmt.Sprintf("ServiceAccount: %v; RoleBindings: %v", errSA, rbs)
	})
	// The API server looks ServiceAccounts up through its own cache: a moment after the deletion.
	addontest.WaitFor(ctx, t, cluster+"'s agent's token no longer authenticating", func() (bool, string) {
		review, err := hub.Kube.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
			Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{hubtoken.Audience}}}, metav1.CreateOptions{})
		return err == nil && !review.Status.Authenticated, fmt.Sprint(review, err)
	})
	if _, err := minter(t, hub.Config, cluster, cluster).Refresh(ctx); !apierrors.IsForbidden(err) {
		t.Errorf("%s's agent minted again after the addon was disabled: %v", cluster, err)
	}
}

// impersonate makes the kubeconfig at path act as cluster's addon agent: the user and groups of
// the client certificate the klusterlet would obtain for it.
func impersonate(t *testing.T, path, cluster string) {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range kc.AuthInfos {
		ai.Impersonate = addontest.AgentUser(addonName, cluster)
		ai.ImpersonateGroups = addontest.AgentGroups(addonName, cluster)
	}
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
}

func deploymentOf(t *testing.T, work *workv1.ManifestWork) *appsv1.Deployment {
	t.Helper()
	for _, m := range work.Spec.Workload.Manifests {
		dep := &appsv1.Deployment{}
		if err := json.Unmarshal(m.Raw, dep); err == nil && dep.Kind == "Deployment" {
			return dep
		}
	}
	t.Fatal("no Deployment in the ManifestWork")
	return nil
}
