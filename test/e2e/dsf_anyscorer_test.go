package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonclient "open-cluster-management.io/api/client/addon/clientset/versioned"
	workclient "open-cluster-management.io/api/client/work/clientset/versioned"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/harness/addontest"
	"github.com/scoreflow/scoreflow/harness/devrun"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/harness/proc"
	"github.com/scoreflow/scoreflow/harness/promserver"
	"github.com/scoreflow/scoreflow/pkg/dsf"
	"github.com/scoreflow/scoreflow/tools"
)

// acme's DSF scorer: written for this test, named nowhere in scoreflow. Its hosts are names no
// cluster resolves; each cluster, and the hub, reaches them at its own local listener
// (DSF_ENDPOINTS, ENDPOINTS), so what each one contacts is counted apart.
const (
	acmeCapacityHost = "http://capacity.acme.example:7000"
	acmePowerHost    = "http://power.acme.example:7001"
	acmeMetricsHost  = "http://metrics.acme.example:9090" // the spec's Prometheus, paired with its token
	acmeRelayHost    = "http://relay.acme.example:9090"   // the Prometheus acme's /config names instead
	acmeScore        = "acme_capacity"
	acmeResource     = "acme-capacity"
	acmePowerScore   = "acme_power"
	acmeScoringToken = "acme-sc0ring-t0ken"
	acmeMetricsToken = "acme-metr1cs-t0ken"
	// The cores pod web-0 of the scored cluster uses: acme's raw score, and the score written,
	// truncated as DSF does.
	acmeCores   = 30.5
	acmeWritten = 30
)

// acmeSpecs are acme's DynamicScorers as a DSF user writes them: acme-capacity syncs its /config
// (Full), which names the score, its interval, its query and another Prometheus than the spec's,
// and its tokens are two Secrets of acme's own naming; acme-power scores with no source and writes
// nowhere (scoreDestination None).
const acmeSpecs = `apiVersion: dynamic-scoring.open-cluster-management.io/v1alpha1
kind: DynamicScorer
metadata: {name: acme-capacity, namespace: open-cluster-management}
spec:
  description: acme's capacity score
  configURL: ` + acmeCapacityHost + `/config
  configSyncMode: Full
  location: External
  scoreDestination: AddOnPlacementScore
  scoreDimensionFormat: "${scoreName}"
  source:
    type: Prometheus
    host: ` + acmeMetricsHost + `
    path: /api/v1/query_range
    auth: {tokenSecretRef: {name: acme-metrics-credentials, key: prom-token}}
  scoring:
    host: ` + acmeCapacityHost + `
    path: /v1/score
    auth: {tokenSecretRef: {name: acme-scoring-credentials, key: bearer}}
---
apiVersion: dynamic-scoring.open-cluster-management.io/v1alpha1
kind: DynamicScorer
metadata: {name: acme-power, namespace: open-cluster-management}
spec:
  description: acme's power score, a metric only
  configURL: ` + acmePowerHost + `/config
  configSyncMode: None
  location: External
  scoreDestination: None
  source: {type: None}
  scoring:
    path: /v1/power
    params: {name: ` + acmePowerScore + `, interval: 15}
`

// acmeConfig is acme-capacity's GET /config: its source is another host than the spec's.
const acmeConfig = `{"name": "acme-capacity", "description": "acme's capacity score",
  "source": {"type": "Prometheus", "host": "` + acmeRelayHost + `", "path": "/api/v1/query_range",
    "params": {"query": "sum(rate(container_cpu_usage_seconds_total[1m]))", "range": 300, "step": 60}},
  "scoring": {"path": "/v1/score", "params": {"name": "` + acmeScore + `", "interval": 15}}}`

// TestDSFScorerNobodyTunedFor: a DSF scorer written here, unknown to scoreflow (its own name, hosts,
// Secret names and keys, /config), runs through the real stack as a DSF user would run it, with
// scoreflow's manifests applied as they ship and never edited (and naming nothing of acme's):
// addon/dsf/with-servicemonitor installed, acme's DynamicScorers and a DynamicScoringConfig masking
// acme_capacity for one cluster applied on the hub, the addon enabled for two clusters with an
// AddOnDeploymentConfig each (the gateway's address, where acme's hosts are from that cluster).
// OCM's addon manager renders each agent; each runs as its ManifestWork describes, with the hub
// identity the addon manager binds. Then: dsf-status writes acme-capacity Active with its /config;
// the gateway admits the new scorer's resource, which no manifest names; the unmasked cluster's
// score lands and moves a Placement; the masked cluster's agent skips acme-capacity and opens no
// connection to its scorer or its Prometheus (while it does run acme-power);
// the Prometheus acme's /config names gets no credential, the spec's Prometheus is never
// contacted, the scorer gets its token; acme-power writes no AddOnPlacementScore; and DSF's
// ServiceMonitor, as the addon distributes it, has a real Prometheus scrape the agent, where DSF's
// dashboard query returns the raw score.
func TestDSFScorerNobodyTunedFor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	if _, err := tools.Path(tools.PrometheusKubernetesSD); err != nil {
		t.Fatal(err)
	}
	gw := stack.Functions["agent-gateway"]
	if gw == nil {
		t.Fatal("no agent-gateway in the stack (deploy/agent-gateway.yaml)")
	}
	built := installDSFSupport(ctx, t, "addon/dsf/with-servicemonitor")
	checkShippedNamesNoScorer(t, built, "acme", acmeScore, acmePowerScore)

	// Without scores every cluster ties: the Placement picks one. acme scores another, so that its
	// score is a move; the third (or the first) is masked.
	placements := stack.Hub.Cluster.ClusterV1beta1().Placements(devrun.Namespace)
	if _, err := placements.Create(ctx, localhub.ScorePlacement(devrun.Namespace, "acme-most-capacity", devrun.ClusterSet, acmeResource, acmeScore, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = placements.Delete(context.Background(), "acme-most-capacity", metav1.DeleteOptions{})
	})
	before := waitDecided(ctx, t, "acme-most-capacity")
	var others []string
	for _, c := range devrun.DemoClusters {
		if c != before {
			others = append(others, c)
		}
	}
	scored, masked := others[0], others[1]

	// acme's servers, each host as the hub and each cluster reach it.
	scorer := &acmeScorer{}
	hubCapacity, hubPower := listen(t, scorer), listen(t, scorer)
	capacity := map[string]*counted{scored: listen(t, scorer), masked: listen(t, scorer)}
	power := map[string]*counted{scored: listen(t, scorer), masked: listen(t, scorer)}
	trap := map[string]*counted{scored: listen(t, scorer), masked: listen(t, scorer)} // the spec's Prometheus
	prom := promserver.Start(t)
	prom.MustPush(t, promserver.Counter(map[string]string{"__name__": "container_cpu_usage_seconds_total",
		"namespace": "shop", "pod": "web-0", "container": "web"}, acmeCores, promserver.Aligned(time.Minute)))
	// The Prometheus acme's /config names, as each cluster reaches it: a working one for both, so
	// that only the mask keeps the masked cluster's agent from acme's capacity scorer.
	relays := map[string]*relay{scored: newRelay(t, prom.URL), masked: newRelay(t, prom.URL)}
	endpoints := map[string]string{}
	for _, c := range []string{scored, masked} {
		endpoints[c] = strings.Join([]string{acmeCapacityHost + "=" + capacity[c].URL, acmePowerHost + "=" + power[c].URL,
			acmeRelayHost + "=" + relays[c].URL, acmeMetricsHost + "=" + trap[c].URL}, ",")
	}

	// What a DSF user applies on the hub: acme's DynamicScorers, the DynamicScoringConfig.
	specs := decodeYAML(t, acmeSpecs+"---\n"+fmt.Sprintf(`apiVersion: dynamic-scoring.open-cluster-management.io/v1alpha1
kind: DynamicScoringConfig
metadata: {name: dynamic-scoring-config, namespace: open-cluster-management}
spec:
  masks:
    - {clusterName: %s, scoreName: %s}
`, masked, acmeScore))
	if err := stack.Knative.Applier.Apply(ctx, specs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, o := range specs {
			gvr := dsf.ScorersResource
			if o.GetKind() == dsf.KindConfig {
				gvr = dsf.ConfigsResource
			}
			_ = dynamic.NewForConfigOrDie(stack.Hub.Config).Resource(gvr).Namespace(o.GetNamespace()).Delete(context.Background(), o.GetName(), metav1.DeleteOptions{})
		}
	})
	runDSFStatus(t, acmeCapacityHost+"="+hubCapacity.URL+","+acmePowerHost+"="+hubPower.URL)
	waitActive(ctx, t)

	// The managed clusters' side, standing in on the hub's API server: acme's Secrets in the
	// agents' namespace.
	secrets := stack.Hub.Kube.CoreV1().Secrets("dynamic-scoring")
	if err := createOrExists(stack.Hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dynamic-scoring"}}, metav1.CreateOptions{})); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]map[string]string{"acme-scoring-credentials": {"bearer": acmeScoringToken}, "acme-metrics-credentials": {"prom-token": acmeMetricsToken}} {
		if err := createOrExists(secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: data}, metav1.CreateOptions{})); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = secrets.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}

	// The addon enabled for the two clusters, each with its own AddOnDeploymentConfig, as
	// docs/dsf.md says for clusters whose hosts differ; OCM's addon manager renders their agents.
	works := enableWithAddonManager(ctx, t, map[string]string{scored: endpoints[scored], masked: endpoints[masked]}, gw.URL)
	ip, err := proc.HostIP()
	if err != nil {
		t.Fatal(err)
	}
	managed := applyAgentRBAC(ctx, t, works[scored])
	agentPort := runAgentOf(ctx, t, works[scored], scored, ip, managed)
	maskedPort := runAgentOf(ctx, t, works[masked], masked, "127.0.0.1", managed)

	waitDecision(ctx, t, "acme-most-capacity", scored)
	aps, err := stack.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(scored).Get(ctx, acmeResource, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(aps.Status.Scores) != 1 || aps.Status.Scores[0].Name != acmeScore || aps.Status.Scores[0].Value != acmeWritten {
		t.Errorf("%s's %s: %+v, want %s %d", scored, acmeResource, aps.Status.Scores, acmeScore, acmeWritten)
	}

	// The masked cluster's agent runs acme-power, and decides acme-capacity is masked (its own
	// count of skipped rounds) without contacting acme's capacity scorer or its Prometheus.
	eventually(t, 60*time.Second, masked+"'s agent never ran acme-power", func() bool { return power[masked].conns.Load() > 0 })
	eventually(t, 60*time.Second, masked+"'s agent neither skipped nor ran acme-capacity", func() bool {
		return skippedRounds(t, maskedPort, "acme-capacity") > 0 || capacity[masked].conns.Load() > 0
	})
	if n, q := capacity[masked].conns.Load(), relays[masked].n.Load(); n != 0 || q != 0 {
		t.Errorf("%s's agent, masked for %s, opened %d connections to acme's capacity scorer and queried its Prometheus %d times", masked, acmeScore, n, q)
	}
	if _, err := stack.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(masked).Get(ctx, acmeResource, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("%s, masked, has %s: %v", masked, acmeResource, err)
	}
	for _, c := range devrun.DemoClusters {
		if _, err := stack.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(c).Get(ctx, "acme-power", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("acme-power, scoreDestination None, was written for %s: %v", c, err)
		}
	}
	// Credentials went where the spec pairs them, and nowhere else.
	if n, withAuth := relays[scored].requests(); n == 0 || withAuth != 0 {
		t.Errorf("the Prometheus acme's /config names got %d requests from %s's agent, %d with credentials: want some, none with credentials", n, scored, withAuth)
	}
	for c, s := range trap {
		if n := s.conns.Load(); n != 0 {
			t.Errorf("%s's agent opened %d connections to the spec's Prometheus, which acme's /config replaced", c, n)
		}
	}
	if auths := scorer.authorizations(); len(auths) == 0 || slices.ContainsFunc(auths, func(a string) bool { return a != "Bearer "+acmeScoringToken }) {
		t.Errorf("acme's scoring calls carried %q, want each the token of Secret acme-scoring-credentials key bearer", auths)
	}
	// dsf-status's view of the scorer.
	u, err := dynamic.NewForConfigOrDie(stack.Hub.Config).Resource(dsf.ScorersResource).Namespace(dsf.DefaultScorersNamespace).Get(ctx, "acme-capacity", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	health, _, _ := unstructured.NestedString(u.Object, "status", "healthStatus")
	synced, _, _ := unstructured.NestedString(u.Object, "status", "lastSyncedConfig", "scoring", "params", "name")
	if health != dsf.HealthActive || synced != acmeScore {
		t.Errorf("acme-capacity's status: healthStatus %q, lastSyncedConfig's name %q; want Active, %s", health, synced, acmeScore)
	}

	// DSF's ServiceMonitor, as the addon distributed it, and DSF's dashboard query.
	checkDashboard(ctx, t, works[scored], scored, ip, agentPort)
}

// checkShippedNamesNoScorer fails the test if scoreflow's manifests (the stack's config/default,
// what `make run` applies unmodified, and the DSF install built) name any of names: the scorer
// needs nothing of scoreflow's but its DynamicScorer.
func checkShippedNamesNoScorer(t *testing.T, dsfInstall []*unstructured.Unstructured, names ...string) {
	t.Helper()
	items, err := manifests.Build(filepath.Join("../..", "config", devrun.Variant(false, false)))
	if err != nil {
		t.Fatal(err)
	}
	objs := slices.Clone(dsfInstall)
	for _, it := range items {
		objs = append(objs, it.Object)
	}
	for _, o := range objs {
		b, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if strings.Contains(string(b), n) {
				t.Errorf("%s %s names %q: scoreflow's manifests must name no scorer", o.GetKind(), o.GetName(), n)
			}
		}
	}
}

// acmeScorer is acme's DSF scorer: GET /config, /healthz; POST /v1/score (bearer token required;
// the score is the sum of the series' last values) and /v1/power.
type acmeScorer struct {
	mu   sync.Mutex
	auth []string
}

func (a *acmeScorer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/config":
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(acmeConfig))
	case "/healthz":
	case "/v1/power":
		_, _ = w.Write([]byte(`{"results": [{"metric": {}, "score": 12.5}]}`))
	case "/v1/score":
		a.mu.Lock()
		a.auth = append(a.auth, r.Header.Get("Authorization"))
		a.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+acmeScoringToken {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		var in struct {
			Data []struct {
				Values [][2]any `json:"values"`
			} `json:"data"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sum := 0.0
		for _, s := range in.Data {
			if len(s.Values) > 0 {
				v, _ := strconv.ParseFloat(fmt.Sprint(s.Values[len(s.Values)-1][1]), 64)
				sum += v
			}
		}
		_, _ = fmt.Fprintf(w, `{"results": [{"metric": {}, "score": %g}]}`, sum)
	default:
		http.NotFound(w, r)
	}
}

func (a *acmeScorer) authorizations() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.auth)
}

// counted is a server on a listener of its own that counts the connections opened to it.
type counted struct {
	*httptest.Server
	conns atomic.Int64
}

func listen(t *testing.T, h http.Handler) *counted {
	t.Helper()
	c := &counted{Server: httptest.NewUnstartedServer(h)}
	c.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			c.conns.Add(1)
		}
	}
	c.Start()
	t.Cleanup(c.Close)
	return c
}

// relay is a reverse proxy to a Prometheus that records whether each request carried credentials.
type relay struct {
	*httptest.Server
	n, withAuth atomic.Int64
}

func newRelay(t *testing.T, target string) *relay {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.n.Add(1)
		if req.Header.Get("Authorization") != "" {
			r.withAuth.Add(1)
		}
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *relay) requests() (int64, int64) { return r.n.Load(), r.withAuth.Load() }

// skippedRounds is the agent's scoreflow_dsf_rounds_total{scorer, outcome="skipped"} on its
// /metrics at 127.0.0.1:port: rounds it decided not to contact scorer (masked, here).
func skippedRounds(t *testing.T, port int, scorer string) float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, m := range families["scoreflow_dsf_rounds_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["scorer"] == scorer && labels["outcome"] == "skipped" {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

func decodeYAML(t *testing.T, doc string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, d := range strings.Split(doc, "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(d), &u.Object); err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

func createOrExists[T any](_ T, err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// waitActive waits until dsf-status has written acme-capacity Active with its /config synced.
func waitActive(ctx context.Context, t *testing.T) {
	t.Helper()
	scorers := dynamic.NewForConfigOrDie(stack.Hub.Config).Resource(dsf.ScorersResource).Namespace(dsf.DefaultScorersNamespace)
	addontest.WaitFor(ctx, t, "acme's scorers Active", func() (bool, string) {
		var states []string
		ok := true
		for _, name := range []string{"acme-capacity", "acme-power"} {
			u, err := scorers.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			h, _, _ := unstructured.NestedString(u.Object, "status", "healthStatus")
			states = append(states, name+"="+h)
			ok = ok && h == dsf.HealthActive
		}
		return ok, strings.Join(states, " ")
	})
}

// enableWithAddonManager runs OCM's addon manager on the stack's hub until the test ends, gives
// each cluster an AddOnDeploymentConfig of its own (GATEWAY_URL: the stack's gateway;
// DSF_ENDPOINTS: its value in endpoints) and enables the DSF addon for it, and returns the
// ManifestWork the addon manager renders for each once the agent's hub permissions are bound.
func enableWithAddonManager(ctx context.Context, t *testing.T, endpoints map[string]string, gateway string) map[string]*workv1.ManifestWork {
	t.Helper()
	if err := createOrExists(stack.Hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "open-cluster-management-hub"}}, metav1.CreateOptions{})); err != nil {
		t.Fatal(err)
	}
	am, err := stack.Hub.StartAddonManager(addontest.ControllerLog(t, 8000, "missing content for CA bundle"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(am.Stop)
	addons := addonclient.NewForConfigOrDie(stack.Hub.Config).AddonV1alpha1()
	out := map[string]*workv1.ManifestWork{}
	for cluster, eps := range endpoints {
		if err := stack.Hub.AcceptCluster(ctx, cluster); err != nil {
			t.Fatal(err)
		}
		name := "dsf-agent-" + cluster
		if _, err := addons.AddOnDeploymentConfigs(devrun.Namespace).Create(ctx, &addonv1alpha1.AddOnDeploymentConfig{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: devrun.Namespace},
			Spec: addonv1alpha1.AddOnDeploymentConfigSpec{AgentInstallNamespace: "dynamic-scoring", CustomizedVariables: []addonv1alpha1.CustomizedVariable{
				{Name: "GATEWAY_URL", Value: gateway}, {Name: "DSF_ENDPOINTS", Value: eps}, {Name: "IMAGE_PULL_SECRET", Value: "open-cluster-management-image-pull-credentials"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = addons.AddOnDeploymentConfigs(devrun.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{})
		})
		// `clusteradm addon enable`, with the cluster's own configuration named.
		if _, err := addons.ManagedClusterAddOns(cluster).Create(ctx, &addonv1alpha1.ManagedClusterAddOn{
			ObjectMeta: metav1.ObjectMeta{Name: dsfAddon, Namespace: cluster},
			Spec: addonv1alpha1.ManagedClusterAddOnSpec{Configs: []addonv1alpha1.AddOnConfig{{
				ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: addonv1alpha1.GroupName, Resource: "addondeploymentconfigs"},
				ConfigReferent:      addonv1alpha1.ConfigReferent{Namespace: devrun.Namespace, Name: name}}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = addons.ManagedClusterAddOns(cluster).Delete(context.Background(), dsfAddon, metav1.DeleteOptions{})
		})
	}
	works := workclient.NewForConfigOrDie(stack.Hub.Config)
	for cluster := range endpoints {
		addontest.WaitFor(ctx, t, cluster+"'s agent rendered with its own configuration", func() (bool, string) {
			got, err := addontest.Works(ctx, works, dsfAddon, cluster)
			if err != nil || len(got) != 1 {
				return false, fmt.Sprintf("%d works, %v", len(got), err)
			}
			env := envOf(deploymentOf(t, &got[0]).Spec.Template.Spec.Containers[0])
			out[cluster] = &got[0]
			return env["K_SINK"] == gateway && env["ENDPOINTS"] == endpoints[cluster], fmt.Sprintf("K_SINK %q ENDPOINTS %q", env["K_SINK"], env["ENDPOINTS"])
		})
		// The hub permissions the addon manager binds to the agent's identity.
		addontest.WaitFor(ctx, t, cluster+"'s agent's hub permissions bound", func() (bool, string) {
			for _, ra := range []authzv1.ResourceAttributes{
				{Namespace: dsf.DefaultScorersNamespace, Group: dsf.Group, Resource: "dynamicscorers", Verb: "watch"},
				{Namespace: cluster, Resource: "serviceaccounts", Subresource: "token", Verb: "create", Name: dsfAddon},
			} {
				r, err := stack.Hub.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
					User: addontest.AgentUser(dsfAddon, cluster), Groups: addontest.AgentGroups(dsfAddon, cluster), ResourceAttributes: &ra}}, metav1.CreateOptions{})
				if err != nil || !r.Status.Allowed {
					return false, fmt.Sprintf("may not %s %s in %s (%v)", ra.Verb, ra.Resource, ra.Namespace, err)
				}
			}
			return true, ""
		})
	}
	return out
}

func deploymentOf(t *testing.T, work *workv1.ManifestWork) *appsv1.Deployment {
	t.Helper()
	for _, m := range work.Spec.Workload.Manifests {
		var d appsv1.Deployment
		if err := json.Unmarshal(m.Raw, &d); err == nil && d.Kind == "Deployment" {
			return &d
		}
	}
	t.Fatalf("ManifestWork %s has no Deployment", work.Name)
	return nil
}

// manifestOf is the manifest of kind in work.
func manifestOf(t *testing.T, work *workv1.ManifestWork, kind string) []byte {
	t.Helper()
	for _, m := range work.Spec.Workload.Manifests {
		var meta metav1.TypeMeta
		if err := json.Unmarshal(m.Raw, &meta); err == nil && meta.Kind == kind {
			return m.Raw
		}
	}
	t.Fatalf("ManifestWork %s has no %s", work.Name, kind)
	return nil
}

// envOf is a container's environment; a value from the downward API is "fieldRef:<path>".
func envOf(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
		}
	}
	return env
}

// applyAgentRBAC creates, on the API server standing in for the managed clusters (the hub's), the
// agent's ServiceAccount, Role and RoleBinding from work, as the klusterlet would, and returns a
// kubeconfig with that ServiceAccount's token: what the agent reads Secrets with.
func applyAgentRBAC(ctx context.Context, t *testing.T, work *workv1.ManifestWork) string {
	t.Helper()
	kube := stack.Hub.Kube
	for _, m := range work.Spec.Workload.Manifests {
		var meta metav1.TypeMeta
		_ = json.Unmarshal(m.Raw, &meta)
		var err error
		switch meta.Kind {
		case "ServiceAccount":
			var o corev1.ServiceAccount
			_ = json.Unmarshal(m.Raw, &o)
			_, err = kube.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		case "Role":
			var o rbacv1.Role
			_ = json.Unmarshal(m.Raw, &o)
			_, err = kube.RbacV1().Roles(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		case "RoleBinding":
			var o rbacv1.RoleBinding
			_ = json.Unmarshal(m.Raw, &o)
			_, err = kube.RbacV1().RoleBindings(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		}
		if err := createOrExists(0, err); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := kube.CoreV1().ServiceAccounts("dynamic-scoring").CreateToken(ctx, dsfAddon, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "managed.kubeconfig")
	if err := localhub.WriteKubeconfig(&rest.Config{Host: stack.Hub.Config.Host, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: stack.Hub.Config.CAData}}, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// runAgentOf runs cluster's agent as its ManifestWork describes, as the klusterlet would, until
// the test ends: the dsf-bridge binary with the Deployment's environment, its file paths under a
// local root, the hub identity the addon manager bound for it (impersonated), and on the managed
// cluster its ServiceAccount's token (managed). It listens on address; its port is returned.
func runAgentOf(ctx context.Context, t *testing.T, work *workv1.ManifestWork, cluster, address, managed string) int {
	t.Helper()
	env := envOf(deploymentOf(t, work).Spec.Template.Spec.Containers[0])
	root := t.TempDir()
	local := func(p string) string { return filepath.Join(root, p) }
	hubKubeconfig := local(env["HUB_KUBECONFIG"])
	for _, d := range []string{filepath.Dir(hubKubeconfig), filepath.Dir(local(env["SINK_TOKEN_FILE"]))} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := stack.Hub.WriteKubeconfig(hubKubeconfig); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.LoadFromFile(hubKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range kc.AuthInfos {
		ai.Impersonate, ai.ImpersonateGroups = addontest.AgentUser(dsfAddon, cluster), addontest.AgentGroups(dsfAddon, cluster)
	}
	if err := clientcmd.WriteToFile(*kc, hubKubeconfig); err != nil {
		t.Fatal(err)
	}
	port, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	vars := []string{"PATH=" + os.Getenv("PATH"), fmt.Sprintf("PORT=%d", port), "ADDRESS=" + address, "MANAGED_KUBECONFIG=" + managed}
	for k, v := range env {
		switch k {
		case "SECRETS_NAMESPACE":
			v = "dynamic-scoring" // the downward API's: the pod's namespace
		case "HUB_KUBECONFIG", "SINK_TOKEN_FILE", "CA_FILE":
			v = local(v)
		}
		vars = append(vars, k+"="+v)
	}
	startAgentBinary(t, cluster, vars, local("agent.log"))
	return port
}

// checkDashboard has a real Prometheus scrape cluster's agent with the scrape configuration the
// Prometheus Operator renders from the ServiceMonitor its ManifestWork carries (discovered through
// the metrics Service of the same work, its pod and endpoints as the cluster's controllers would
// write them), and checks DSF's dashboard query of acme's score returns the raw value.
func checkDashboard(ctx context.Context, t *testing.T, work *workv1.ManifestWork, cluster, ip string, port int) {
	t.Helper()
	sm, err := promserver.ParseServiceMonitor(manifestOf(t, work, "ServiceMonitor"))
	if err != nil {
		t.Fatal(err)
	}
	var svc corev1.Service
	if err := json.Unmarshal(manifestOf(t, work, "Service"), &svc); err != nil {
		t.Fatal(err)
	}
	kube := stack.Hub.Kube
	if err := createOrExists(kube.CoreV1().Services(svc.Namespace).Create(ctx, &svc, metav1.CreateOptions{})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().Services(svc.Namespace).Delete(context.Background(), svc.Name, metav1.DeleteOptions{})
	})
	dep := deploymentOf(t, work)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "scoreflow-dsf-agent-" + cluster, Namespace: svc.Namespace, Labels: dep.Spec.Template.Labels},
		Spec: *dep.Spec.Template.Spec.DeepCopy()}
	pod.Spec.ImagePullSecrets, pod.Spec.Volumes, pod.Spec.Containers[0].VolumeMounts = nil, nil, nil
	pod.Spec.Containers[0].Image = "dsf-bridge"
	created, err := kube.CoreV1().Pods(svc.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().Pods(svc.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	})
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	if _, err := kube.CoreV1().Pods(svc.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	//nolint:staticcheck // Endpoints: what the Prometheus Operator's default discovery role reads.
	if _, err := kube.CoreV1().Endpoints(svc.Namespace).Create(ctx, &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace, Labels: svc.Labels},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: ip, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod.Name, Namespace: svc.Namespace}}},
			Ports:     []corev1.EndpointPort{{Name: svc.Spec.Ports[0].Name, Port: int32(port)}},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, data := range map[string][]byte{"ca.crt": stack.Hub.Config.CAData, "client.crt": stack.Hub.Config.CertData, "client.key": stack.Hub.Config.KeyData} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sd := fmt.Sprintf("    api_server: %s\n    tls_config: {ca_file: %s, cert_file: %s, key_file: %s}",
		stack.Hub.Config.Host, filepath.Join(dir, "ca.crt"), filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key"))
	scrape, err := sm.ScrapeConfigs(sd)
	if err != nil {
		t.Fatal(err)
	}
	// DSF's interval, 15s, would make the test wait that long for a first scrape.
	scrape = strings.ReplaceAll(scrape, "scrape_interval: "+sm.Spec.Endpoints[0].Interval, "scrape_interval: 1s")
	ps, err := promserver.RunTool(tools.PrometheusKubernetesSD, "scrape_configs:\n"+scrape)
	if err != nil {
		t.Fatalf("%v\nthe rendered configuration:\n%s", err, scrape)
	}
	t.Cleanup(ps.Stop)
	// DSF's Grafana dashboard's panel query, for acme's score.
	query := fmt.Sprintf(`sum by(ds_cluster) (dynamic_score{ds_score_name=%q})`, acmeScore)
	var result []struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	}
	eventually(t, 90*time.Second, "DSF's dashboard query "+query+" returned nothing", func() bool {
		resp, err := http.Get(ps.URL + "/api/v1/query?query=" + url.QueryEscape(query))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var out struct {
			Data struct {
				Result json.RawMessage `json:"result"`
			} `json:"data"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		_ = json.Unmarshal(out.Data.Result, &result)
		return len(result) > 0
	})
	v, _ := strconv.ParseFloat(fmt.Sprint(result[0].Value[1]), 64)
	if len(result) != 1 || result[0].Metric["ds_cluster"] != cluster || math.Abs(v-acmeCores) > 1e-6 {
		t.Errorf("%s = %+v, want {ds_cluster=%s} %g", query, result, cluster, acmeCores)
	}
}
