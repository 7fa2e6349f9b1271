package dsf_test

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

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonclient "open-cluster-management.io/api/client/addon/clientset/versioned"
	workclient "open-cluster-management.io/api/client/work/clientset/versioned"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/scoreflow/scoreflow/harness/addontest"
	"github.com/scoreflow/scoreflow/harness/dsfupstream"
	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/harness/localhub"
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

// TestDSFAddonRunsPublishedSpecs runs OCM's real addon manager on a local hub with this
// directory's manifests applied (server-side, strict against the CRDs), DSF's published sample
// DynamicScorer applied unchanged, and checks what enabling the addon for cluster1 does: a
// ManifestWork carries the agent with cluster1's name, the gateway, the endpoint map and the DSF
// Secrets' mounts, in DSF's agent namespace (created if missing, never deleted); the agent's hub
// identity reads DynamicScorers in open-cluster-management, mints its own gateway token in its own
// cluster's namespace and nothing else. The agent the ManifestWork describes then runs (the
// dsf-bridge binary, with the hub credentials the klusterlet would give it) against a real
// Prometheus standing in for cluster1's and DSF's own sample scorer: it sends cluster1's scores
// to a stand-in gateway with a token the hub authenticates as
// system:serviceaccount:cluster1:scoreflow-dsf-agent. Disabling removes the ManifestWork.
func TestDSFAddonRunsPublishedSpecs(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
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
	for _, c := range []string{"cluster1", "cluster2"} {
		if err := hub.AddCluster(ctx, c, nil); err != nil {
			t.Fatal(err)
		}
		if err := hub.AcceptCluster(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	logFile := addontest.ControllerLog(t, 8000)
	gc, err := hub.StartGarbageCollector(ctx, logFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gc.Stop)
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
	if err := applier.Apply(ctx, objs...); err != nil {
		t.Fatal(err)
	}
	// DSF's published sample, applied as DSF's quickstart says.
	spec, err := knlocal.ReadFiles(dsfupstream.Spec(t, "mydynamicscorer-sample.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range spec {
		o.SetNamespace(scorersNS)
	}
	if err := applier.Apply(ctx, spec...); err != nil {
		t.Fatal(err)
	}

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
	checkHubPermissions(ctx, t, hub.Config, "cluster1")
	runAgent(ctx, t, hub, dep, "cluster1")

	// `clusteradm addon disable`: the ManifestWork goes (garbage-collected with its owner).
	if err := addons.AddonV1alpha1().ManagedClusterAddOns("cluster1").Delete(ctx, addonName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	addontest.WaitFor(ctx, t, "the agent's ManifestWork removed", func() (bool, string) {
		got, err := addontest.Works(ctx, works, addonName, "cluster1")
		return err == nil && len(got) == 0, fmt.Sprintf("%d works, %v", len(got), err)
	})
	if exited, err := am.Exited(); exited {
		t.Errorf("the addon manager exited: %v", err)
	}
}

// checkWork asserts the ManifestWork carries the agent configured for cluster and returns its
// Deployment.
func checkWork(t *testing.T, work *workv1.ManifestWork, cluster string) *appsv1.Deployment {
	t.Helper()
	var dep *appsv1.Deployment
	kinds := map[string]bool{}
	for _, m := range work.Spec.Workload.Manifests {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(m.Raw, &meta); err != nil {
			t.Fatal(err)
		}
		kinds[meta.Kind] = true
		if meta.Kind == "Namespace" && meta.Metadata.Name != agentNS {
			t.Errorf("Namespace %s, want %s", meta.Metadata.Name, agentNS)
		} else if meta.Kind != "Namespace" && meta.Metadata.Namespace != agentNS {
			t.Errorf("%s in namespace %q, want %q", meta.Kind, meta.Metadata.Namespace, agentNS)
		}
		if meta.Kind == "Deployment" {
			dep = &appsv1.Deployment{}
			if err := json.Unmarshal(m.Raw, dep); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "Deployment"} {
		if !kinds[k] {
			t.Errorf("ManifestWork has no %s (has %v)", k, kinds)
		}
	}
	// Disabling the addon leaves DSF's namespace, and the user's Secrets in it, in place.
	orphaned := false
	if do := work.Spec.DeleteOption; do != nil && do.SelectivelyOrphan != nil {
		for _, r := range do.SelectivelyOrphan.OrphaningRules {
			orphaned = orphaned || (r.Resource == "namespaces" && r.Name == agentNS)
		}
	}
	if !orphaned {
		t.Errorf("namespace %s would be deleted with the addon: delete option %+v", agentNS, work.Spec.DeleteOption)
	}
	if dep == nil {
		t.FailNow()
	}
	c := dep.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	for k, v := range map[string]string{
		"CLUSTER":           cluster,
		"K_SINK":            gatewayURL,
		"ENDPOINTS":         "http://kube-prometheus-kube-prome-prometheus.monitoring.svc:9090",
		"SCORERS_NAMESPACE": scorersNS,
		"HUB_KUBECONFIG":    "/managed/hub-kubeconfig/kubeconfig",
		"HUB_TOKEN_ADDON":   addonName,
		"SINK_TOKEN_FILE":   "/var/run/scoreflow/hub-token/token",
		"TOKEN_DIR":         "/var/run/secrets/scoreflow/dsf",
	} {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	// Each Secret DSF's published specs name, mounted as <name>/<key> under TOKEN_DIR.
	projected := map[string]bool{}
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.Secret != nil {
				for _, it := range s.Secret.Items {
					projected[s.Secret.Name+"/"+it.Key+"="+it.Path] = s.Secret.Optional != nil && *s.Secret.Optional
				}
			}
		}
	}
	for _, ref := range []string{"api-auth-secret/token", "source-query-secret/token", "prometheus-token-secret/token"} {
		if !projected[ref+"="+ref] {
			t.Errorf("Secret key %s is not mounted (optional) at TOKEN_DIR/%s: %v", ref, ref, projected)
		}
	}
	return dep
}

// checkHubPermissions asserts what the addon manager binds to cluster's agent: read the
// DynamicScorers where DSF keeps them, mint its own gateway token; nothing else.
func checkHubPermissions(ctx context.Context, t *testing.T, cfg *rest.Config, cluster string) {
	t.Helper()
	agent := kubernetes.NewForConfigOrDie(addontest.Impersonating(cfg, addonName, cluster))
	can := func(ra authzv1.ResourceAttributes) bool {
		r, err := agent.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{
			Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status.Allowed
	}
	dsfGroup := "dynamic-scoring.open-cluster-management.io"
	allowed := []authzv1.ResourceAttributes{
		{Namespace: scorersNS, Group: dsfGroup, Resource: "dynamicscorers", Verb: "list"},
		{Namespace: scorersNS, Group: dsfGroup, Resource: "dynamicscorers", Verb: "watch"},
		{Namespace: scorersNS, Group: dsfGroup, Resource: "dynamicscoringconfigs", Verb: "watch"},
		{Namespace: cluster, Resource: "serviceaccounts", Subresource: "token", Verb: "create", Name: addonName},
		{Namespace: cluster, Group: "addon.open-cluster-management.io", Resource: "managedclusteraddons", Verb: "get", Name: addonName},
	}
	addontest.WaitFor(ctx, t, cluster+"'s agent's hub permissions bound", func() (bool, string) {
		for _, ra := range allowed {
			if !can(ra) {
				return false, fmt.Sprintf("may not %s %s in %s", ra.Verb, ra.Resource, ra.Namespace)
			}
		}
		return true, ""
	})
	for _, ra := range []authzv1.ResourceAttributes{
		{Namespace: scorersNS, Group: dsfGroup, Resource: "dynamicscorers", Verb: "update"},
		{Namespace: scorersNS, Group: dsfGroup, Resource: "dynamicscorers", Subresource: "status", Verb: "update"},
		{Namespace: "elsewhere", Group: dsfGroup, Resource: "dynamicscorers", Verb: "list"},
		{Namespace: scorersNS, Resource: "secrets", Verb: "list"},
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

// runAgent runs the agent dep describes, as the klusterlet would: the dsf-bridge binary with the
// Deployment's environment and the agent's hub identity, against a Prometheus standing in for the
// cluster's, DSF's own sample scorer behind the spec's <NodeIP>:30007 and a stand-in for the
// gateway. Every variable the template sets must be one the binary reads.
func runAgent(ctx context.Context, t *testing.T, hub *localhub.Hub, dep *appsv1.Deployment, cluster string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "dsf-bridge")
	if out, err := exec.Command("go", "build", "-o", bin, "../../functions/dsf-bridge").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	c := dep.Spec.Template.Spec.Containers[0]
	for _, e := range c.Env {
		if e.Name == "CLUSTER_NAME" || e.Name == "INSTALL_NAMESPACE" {
			continue // the addon manager's own, in every container
		}
		if !strings.Contains(string(help), "[env "+e.Name+"]") && !strings.Contains(string(help), "$"+e.Name) {
			t.Errorf("the template sets %s, which the dsf-bridge does not read", e.Name)
		}
	}

	// cluster1's Prometheus: two pods using 2.5 and 4.5 cores, no cluster label.
	prom := promserver.Start(t)
	now := promserver.Aligned(time.Minute)
	var series []promserver.Series
	for i, rate := range []float64{2.5, 4.5} {
		series = append(series, promserver.Counter(map[string]string{"__name__": "container_cpu_usage_seconds_total", "node": "worker-1",
			"namespace": "shop", "pod": fmt.Sprintf("web-%d", i), "container": "web"}, rate, now))
	}
	prom.MustPush(t, series...)
	sample := dsfupstream.Scorer(t, "sample-scorer")

	type arrival struct {
		auth string
		su   *contract.ScoreUpdated
		err  error
	}
	got := make(chan arrival, 10)
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
	for _, d := range []string{filepath.Dir(hubKubeconfig), local("/var/run/scoreflow/hub-token"), local("/var/run/secrets/scoreflow/dsf")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := localhub.WriteKubeconfig(rest.CopyConfig(hub.Config), hubKubeconfig); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.LoadFromFile(hubKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range kc.AuthInfos {
		ai.Impersonate, ai.ImpersonateGroups = addontest.AgentUser(addonName, cluster), addontest.AgentGroups(addonName, cluster)
	}
	if err := clientcmd.WriteToFile(*kc, hubKubeconfig); err != nil {
		t.Fatal(err)
	}

	env := []string{"PATH=" + os.Getenv("PATH"), "PORT=0", "ADDRESS=127.0.0.1"}
	for _, e := range c.Env {
		v := e.Value
		switch e.Name {
		case "K_SINK":
			v = gateway.URL
		case "ENDPOINTS":
			// The cluster's AddOnDeploymentConfig would name its scorer; here, local stand-ins.
			v = strings.Join([]string{"http://kube-prometheus-kube-prome-prometheus.monitoring.svc:9090=" + prom.URL, "http://<NodeIP>:30007=" + sample}, ",")
		case "HUB_KUBECONFIG", "SINK_TOKEN_FILE", "TOKEN_DIR":
			v = local(v)
		}
		env = append(env, e.Name+"="+v)
	}
	p, err := proc.Start(proc.Spec{Name: "dsf-agent", Path: bin, Env: env, Out: addontest.Log{T: t}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(5 * time.Second)
	select {
	case a := <-got:
		if a.err != nil {
			t.Fatalf("the agent sent no score.updated: %v", a.err)
		}
		want := []contract.Score{{Name: "worker-1;shop;web-0", Value: 2}, {Name: "worker-1;shop;web-1", Value: 4}}
		if a.su.Resource != "sample-my-score" || len(a.su.Items) != 1 || a.su.Items[0].Cluster != cluster || fmt.Sprint(a.su.Items[0].Scores) != fmt.Sprint(want) {
			t.Errorf("the agent sent %+v, want %s's sample-my-score %v", a.su, cluster, want)
		}
		token, ok := strings.CutPrefix(a.auth, "Bearer ")
		if !ok {
			t.Fatalf("the agent sent no bearer token (Authorization %q)", a.auth)
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
	case <-time.After(90 * time.Second):
		t.Fatal("the agent sent nothing within 90s")
	}
}
