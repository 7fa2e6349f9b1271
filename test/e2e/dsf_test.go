package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonclient "open-cluster-management.io/api/client/addon/clientset/versioned"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/scoreflow/scoreflow/harness/devrun"
	"github.com/scoreflow/scoreflow/harness/dsfupstream"
	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/harness/proc"
	"github.com/scoreflow/scoreflow/harness/promserver"
	"github.com/scoreflow/scoreflow/pkg/dsf"
)

const dsfAddon = "scoreflow-dsf-agent"

// TestDSFAgentsMoveAPlacement: DSF's published sample DynamicScorer, applied unchanged to the hub,
// runs in the DSF agent of two managed clusters (the dsf-bridge binary in agent mode, each with a
// real Prometheus standing in for its cluster's, holding series without a cluster label), calling
// DSF's own sample scorer; each agent's scores go through the agent gateway (its hub token
// verified, its cluster checked, its resource the one the hub's DynamicScorer produces, as
// addon/dsf installed as it ships lets the gateway see), the Broker and the score-writer to the cluster's
// AddOnPlacementScore, and move a Placement that prefers the busiest pod web-0: first to the
// only cluster scored, then to the other once its agent reports a busier one.
func TestDSFAgentsMoveAPlacement(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	gw := stack.Functions["agent-gateway"]
	if gw == nil {
		t.Fatal("no agent-gateway in the stack (deploy/agent-gateway.yaml)")
	}
	sample := dsfupstream.Scorer(t, "sample-scorer")
	installDSF(ctx, t, sample)
	// The addon enabled for both clusters, as `clusteradm addon enable` does: the gateway admits an
	// agent only while its ManagedClusterAddOn exists, which also owns the agent's hub ServiceAccount.
	enableDSFAddon(ctx, t, "cluster1")
	enableDSFAddon(ctx, t, "cluster2")
	if _, err := stack.Hub.Cluster.ClusterV1beta1().Placements(devrun.Namespace).Create(ctx,
		localhub.ScorePlacement(devrun.Namespace, "dsf-busiest-web", devrun.ClusterSet, "sample-my-score", "worker-1;shop;web-0", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stack.Hub.Cluster.ClusterV1beta1().Placements(devrun.Namespace).Delete(context.Background(), "dsf-busiest-web", metav1.DeleteOptions{})
	})

	// Without scores every cluster ties: the Placement picks one. The first agent runs on another
	// cluster, so that each step is a move.
	before := waitDecided(ctx, t, "dsf-busiest-web")
	first, second := "cluster1", "cluster2"
	if before == "cluster1" {
		first, second = "cluster2", "cluster1"
	}
	startDSFAgent(t, first, 3.5, gw.URL, sample)
	waitDecision(ctx, t, "dsf-busiest-web", first)
	startDSFAgent(t, second, 40.5, gw.URL, sample)
	waitDecision(ctx, t, "dsf-busiest-web", second)

	for c, want := range map[string]int32{first: 3, second: 40} {
		aps, err := stack.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(c).Get(ctx, "sample-my-score", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int32{}
		for _, s := range aps.Status.Scores {
			got[s.Name] = s.Value
		}
		if got["worker-1;shop;web-0"] != want || got["worker-1;shop;web-1"] != 1 || aps.Status.ValidUntil == nil {
			t.Errorf("%s: sample-my-score %v (validUntil %v), want web-0 %d and web-1 1", c, got, aps.Status.ValidUntil, want)
		}
	}
}

// installDSF installs DSF support on the stack's hub (installDSFSupport, addon/dsf as it ships),
// applies DSF's published sample spec and DynamicScoringConfig, unchanged, where DSF's guide
// applies them, and runs the hub's status writer (runDSFStatus), which writes the scorer Active:
// agents run only Active scorers, and none without a DynamicScoringConfig. sample is where the hub
// reaches the spec's <NodeIP>:30007.
func installDSF(ctx context.Context, t *testing.T, sample string) {
	t.Helper()
	installDSFSupport(ctx, t, "addon/dsf")
	spec, err := knlocal.ReadFiles(dsfupstream.Spec(t, "mydynamicscorer-sample.yaml"), dsfupstream.Spec(t, "mydynamicscoringconfig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range spec {
		o.SetNamespace(dsf.DefaultScorersNamespace)
	}
	if err := stack.Knative.Applier.Apply(ctx, spec...); err != nil {
		t.Fatal(err)
	}
	runDSFStatus(t, "http://<NodeIP>:30007="+sample)
}

// installDSFSupport installs on the stack's hub what docs/dsf.md has a DSF user install: the DSF
// CRDs (addon/dsf/crds) and the kustomization dir (addon/dsf or a variant of it) as it ships, built
// as `kubectl kustomize` builds it and applied unmodified: the agent addon, the status writer's
// account and the agent gateway's read of the DynamicScorers, whose AddOnPlacementScores the
// gateway then admits for the DSF agents. It returns the objects applied.
func installDSFSupport(ctx context.Context, t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	if _, err := envtest.InstallCRDs(stack.Hub.Config, envtest.CRDInstallOptions{Paths: []string{"../../addon/dsf/crds"}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := stack.Hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dsf.DefaultScorersNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	items, err := manifests.Build(filepath.Join("../..", dir))
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, it := range items {
		objs = append(objs, it.Object)
	}
	if err := stack.Knative.Applier.Apply(ctx, objs...); err != nil {
		t.Fatal(err)
	}
	return objs
}

// runDSFStatus runs the hub's status writer (functions/dsf-status) until the test ends, with
// endpoints as its ENDPOINTS.
func runDSFStatus(t *testing.T, endpoints string) {
	t.Helper()
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "dsf-status.log"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := proc.Start(proc.Spec{Name: "dsf-status", Path: filepath.Join(binDir, "dsf-status"), Out: out, Env: append(os.Environ(),
		"PORT=0", "ADDRESS=127.0.0.1", "KUBECONFIG="+stack.Kubeconfig, "LEADER_ELECT=false", "ENDPOINTS="+endpoints)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop(5 * time.Second)
		_ = out.Close()
		if t.Failed() {
			b, _ := os.ReadFile(out.Name())
			t.Logf("dsf-status:\n%s", b)
		}
	})
}

// enableDSFAddon creates cluster's ManagedClusterAddOn of the DSF agent until the test ends.
func enableDSFAddon(ctx context.Context, t *testing.T, cluster string) {
	t.Helper()
	addons := addonclient.NewForConfigOrDie(stack.Hub.Config)
	if _, err := addons.AddonV1alpha1().ManagedClusterAddOns(cluster).Create(ctx, &addonv1alpha1.ManagedClusterAddOn{
		ObjectMeta: metav1.ObjectMeta{Name: dsfAddon, Namespace: cluster}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = addons.AddonV1alpha1().ManagedClusterAddOns(cluster).Delete(context.Background(), dsfAddon, metav1.DeleteOptions{})
	})
}

// startDSFAgent runs cluster's DSF agent with its own Prometheus, where pod web-0 uses busy cores
// and web-1 1.5.
func startDSFAgent(t *testing.T, cluster string, busy float64, gateway, sample string) {
	t.Helper()
	prom := promserver.Start(t)
	now := promserver.Aligned(time.Minute)
	var series []promserver.Series
	for pod, rate := range map[string]float64{"web-0": busy, "web-1": 1.5} {
		series = append(series, promserver.Counter(map[string]string{"__name__": "container_cpu_usage_seconds_total",
			"node": "worker-1", "namespace": "shop", "pod": pod, "container": "web"}, rate, now))
	}
	prom.MustPush(t, series...)
	runDSFAgent(t, cluster, prom.URL, gateway, sample)
}

// runDSFAgent runs cluster's DSF agent (the dsf-bridge binary in agent mode) until the test ends:
// the Prometheus DSF's spec names is promURL, DSF's sample scorer is behind the spec's
// <NodeIP>:30007; it reads the hub's DynamicScorers and mints its gateway token with a hub
// kubeconfig (the addon's own hub identity is addon/dsf's test), and sends to the gateway.
func runDSFAgent(t *testing.T, cluster, promURL, gateway, sample string) {
	t.Helper()
	dir := t.TempDir()
	env := append(os.Environ(),
		"PORT=0", "ADDRESS=127.0.0.1",
		"CLUSTER="+cluster,
		"ENDPOINTS="+strings.Join([]string{"http://kube-prometheus-kube-prome-prometheus.monitoring.svc:9090=" + promURL, "http://<NodeIP>:30007=" + sample}, ","),
		"HUB_KUBECONFIG="+stack.Kubeconfig,
		"HUB_TOKEN_ADDON="+dsfAddon,
		"SINK_TOKEN_FILE="+filepath.Join(dir, "token"),
		"K_SINK="+gateway,
	)
	startAgentBinary(t, cluster, env, filepath.Join(dir, "agent.log"))
}

// startAgentBinary runs the dsf-bridge binary as cluster's agent with env until the test ends,
// its output in logFile and in the test's log if the test fails.
func startAgentBinary(t *testing.T, cluster string, env []string, logFile string) {
	t.Helper()
	out, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	p, err := proc.Start(proc.Spec{Name: "dsf-agent-" + cluster, Path: filepath.Join(binDir, "dsf-bridge"), Env: env, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop(5 * time.Second)
		_ = out.Close()
		if t.Failed() {
			b, _ := os.ReadFile(out.Name())
			t.Logf("%s's agent:\n%s", cluster, b)
		}
	})
}

// waitDecided waits until the placement has decided one cluster and returns it.
func waitDecided(ctx context.Context, t *testing.T, placement string) string {
	t.Helper()
	for {
		d, err := devrun.Decision(ctx, stack.Hub.Cluster, devrun.Namespace, placement)
		if err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
		if len(d) == 1 {
			return d[0]
		}
		select {
		case <-ctx.Done():
			t.Fatalf("placement %s decided %v", placement, d)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func waitDecision(ctx context.Context, t *testing.T, placement, want string) {
	t.Helper()
	last := ""
	for {
		d, err := devrun.Decision(ctx, stack.Hub.Cluster, devrun.Namespace, placement)
		if err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
		last = fmt.Sprint(d)
		if len(d) == 1 && d[0] == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("placement %s decided %s, want %s", placement, last, want)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestDSFAgentManyPods: DSF's published sample spec scores every pod, ${node};${namespace};${pod};
// on a cluster of 2,500 pods its one score.updated carries 2,500 scores, and the whole path
// (agent, DSF's sample scorer, gateway, broker, writer) lands them in one AddOnPlacementScore.
func TestDSFAgentManyPods(t *testing.T) {
	const pods = 2500
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	gw := stack.Functions["agent-gateway"]
	if gw == nil {
		t.Fatal("no agent-gateway in the stack (deploy/agent-gateway.yaml)")
	}
	sample := dsfupstream.Scorer(t, "sample-scorer")
	installDSF(ctx, t, sample)
	enableDSFAddon(ctx, t, "cluster3")
	prom := promserver.Start(t)
	now := promserver.Aligned(time.Minute)
	series := make([]promserver.Series, 0, pods)
	for i := range pods {
		series = append(series, promserver.Counter(map[string]string{"__name__": "container_cpu_usage_seconds_total",
			"node": fmt.Sprintf("worker-%02d.cluster3.example.com", i%40), "namespace": fmt.Sprintf("team-%03d", i%150),
			"pod": fmt.Sprintf("app-%05d-7d9f8b6c5d-x2x9z", i), "container": "app"}, float64(i%90)+0.5, now))
	}
	prom.MustPush(t, series...)
	began := time.Now()
	runDSFAgent(t, "cluster3", prom.URL, gw.URL, sample)
	for {
		aps, err := stack.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("cluster3").Get(ctx, "sample-my-score", metav1.GetOptions{})
		if err == nil && len(aps.Status.Scores) == pods {
			t.Logf("%d pod scores on the hub %s after the agent started", pods, time.Since(began).Round(time.Millisecond))
			for _, s := range aps.Status.Scores {
				if s.Name == "worker-00.cluster3.example.com;team-000;app-00000-7d9f8b6c5d-x2x9z" && s.Value != 0 {
					t.Errorf("%s = %d, want 0 (0.5 cores, truncated)", s.Name, s.Value)
				}
			}
			return
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			n := 0
			if aps != nil {
				n = len(aps.Status.Scores)
			}
			t.Fatalf("%d of %d pod scores on the hub", n, pods)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
