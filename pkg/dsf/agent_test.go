package dsf_test

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/scoreflow/scoreflow/harness/dsfupstream"
	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/promserver"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/dsf"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// hubNamespace is where DSF's quickstart applies DynamicScorers: DSF's own namespace on the hub
// (its Helm install's). agentNamespace is DSF's agent namespace on a managed cluster.
const (
	hubNamespace   = "open-cluster-management"
	agentNamespace = "dynamic-scoring"
)

// recorder is the agent's sink: every score.updated it sends, decoded.
type recorder struct {
	mu   sync.Mutex
	sent []*contract.ScoreUpdated
	srcs []string
}

func (r *recorder) Send(_ context.Context, e event.Event) error {
	su, err := contract.DecodeScoreUpdated(&e)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent, r.srcs = append(r.sent, su), append(r.srcs, e.Source())
	return nil
}

// latest is the last score.updated for resource, or nil.
func (r *recorder) latest(resource string) *contract.ScoreUpdated {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.sent) - 1; i >= 0; i-- {
		if r.sent[i].Resource == resource {
			return r.sent[i]
		}
	}
	return nil
}

func (r *recorder) resources() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, s := range r.sent {
		seen[s.Resource] = true
	}
	var out []string
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// applyPublished applies DSF's published objects, unchanged, into the hub namespace, as DSF's
// quickstart does (kubectl apply -f samples/<file> -n open-cluster-management).
func applyPublished(ctx context.Context, t *testing.T, a *knlocal.Applier, files ...string) {
	t.Helper()
	for _, f := range files {
		objs, err := knlocal.ReadFiles(dsfupstream.Spec(t, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			o.SetNamespace(hubNamespace)
		}
		if err := a.Apply(ctx, objs...); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
}

// TestAgentRunsDSFPublishedSpecsUnchanged is DSF's agent on one managed cluster: the hub holds
// every DynamicScorer DSF publishes, applied unchanged under scoreflow's CRDs, and DSF's published
// DynamicScoringConfig; the hub's status writer probes each scorer as DSF's controller does and
// writes it Active, with its /config in status.lastSyncedConfig; the agent reads them with a hub
// client, runs each against this cluster's Prometheus (a real one holding the series DSF's queries
// read, without a cluster label, as a managed cluster's own Prometheus holds them) and DSF's own
// sample, static and LLM forecast scorers (unmodified; the scorers that need darts stood in by
// testdata/dsf_scorer.py), with the token Secrets DSF's guide creates, read through the API, and
// sends this cluster's scores. The endpoint map says where each spec's placeholder hosts are. The
// published masks name the LLM forecast for cluster2: cluster2's agent never calls that scorer.
func TestAgentRunsDSFPublishedSpecsUnchanged(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	if _, err := envtest.InstallCRDs(hub.Config, envtest.CRDInstallOptions{Paths: []string{"../../addon/dsf/crds"}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hubNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	applier, err := knlocal.NewApplier(hub.Config)
	if err != nil {
		t.Fatal(err)
	}
	applyPublished(ctx, t, applier,
		"mydynamicscorer-sample.yaml", "mydynamicscorer-example-performance.yaml", "mydynamicscorer-example-powerconsumption.yaml",
		"mydynamicscorer-external-llm.yaml", "mydynamicscorer-simple-prediction.yaml", "ai-workload-perf-scorer.yaml", "ai-workload-power-scorer.yaml",
		"mydynamicscoringconfig.yaml")

	// This cluster's Prometheus: three pods using 1.5, 2.5 and 3.5 cores, GPU power per app and
	// device, vLLM's token counter.
	prom := promserver.Start(t)
	now := promserver.Aligned(time.Minute)
	var series []promserver.Series
	for i := range 3 {
		series = append(series, promserver.Counter(l("__name__", "container_cpu_usage_seconds_total", "node", "worker-1", "namespace", "shop",
			"pod", fmt.Sprintf("web-%d", i), "container", "web"), float64(i)+1.5, now))
	}
	series = append(series,
		promserver.Counter(l("__name__", "vllm:generation_tokens_total", "pod", "app01-abc"), 20, now),
		promserver.Grid(l("__name__", "DCGM_FI_DEV_POWER_USAGE", "Hostname", "worker-1", "GPU_I_ID", "0", "GPU_I_PROFILE", "3g.47gb", "exported_pod", "app01-abc"), now, time.Minute, 150, 150, 150, 150, 150),
	)
	prom.MustPush(t, series...)

	model := newCompletions(t, time.Second)
	sample := dsfupstream.Scorer(t, "sample-scorer")
	static := dsfupstream.Scorer(t, "static-scorer")
	llm := dsfupstream.Scorer(t, "llm-forecast-scorer", "INFERENCE_ENDPOINT="+model.URL, "MODEL_NAME=stand-in")
	prediction := python(t, "simple-prediction")
	aiWorkload := python(t, "ai-workload")
	endpoints := strings.Join([]string{
		"http://kube-prometheus-kube-prome-prometheus.monitoring.svc:9090=" + prom.URL,
		"https://thanos-querier.openshift-monitoring.svc.cluster.local:9091=" + prom.URL,
		"http://<NodeIP>:30007=" + sample,
		"http://static-scorer:8000=" + static,
		"http://${EXTERNAL_SCORER_IP}:8000=" + llm,
		"http://simple-prediction-scorer:8000=" + prediction,
		"http://${AI_WORKLOAD_SCORER_HOST}=" + aiWorkload,
	}, ",")
	// The token Secrets DSF's guide creates in the agent's namespace on each managed cluster; the
	// local API server stands in for the managed cluster's.
	if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, token := range map[string]string{"api-auth-secret": "dummy-token-1234", "source-query-secret": "prometheus-token"} {
		if _, err := hub.Kube.CoreV1().Secrets(agentNamespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
			StringData: map[string]string{"token": token}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tokens := &dsf.SecretTokens{Secrets: hub.Kube.CoreV1(), Namespace: agentNamespace}
	dyn := dynamic.NewForConfigOrDie(hub.Config)

	// The hub's status writer probes every scorer as DSF's controller does; agents run only the
	// Active ones, with the /config it synced.
	eps, err := dsf.ParseEndpoints(endpoints)
	if err != nil {
		t.Fatal(err)
	}
	sw, err := dsf.NewStatusWriter(dyn, hubNamespace, dsf.StatusOptions{Endpoints: eps}, nil, slog.New(slog.NewTextHandler(&testLog{t: t, prefix: "status"}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	swCtx, stopStatus := context.WithCancel(ctx)
	swDone := make(chan error, 1)
	go func() { swDone <- sw.Run(swCtx) }()
	defer func() { stopStatus(); <-swDone }()
	waitFor(ctx, t, "every published scorer Active", func() bool {
		l, err := dyn.Resource(dsf.ScorersResource).Namespace(hubNamespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 7 {
			return false
		}
		for _, u := range l.Items {
			if h, _, _ := unstructured.NestedString(u.Object, "status", "healthStatus"); h != dsf.HealthActive {
				return false
			}
		}
		return true
	})
	// With configSyncMode Full, the scorer's /config is in the status, as DSF's MCP sample reads it.
	u, err := dyn.Resource(dsf.ScorersResource).Namespace(hubNamespace).Get(ctx, "sample-scorer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if name, _, _ := unstructured.NestedString(u.Object, "status", "lastSyncedConfig", "scoring", "params", "name"); name != "sample_my_score" {
		t.Errorf("sample-scorer's status.lastSyncedConfig names score %q, want sample_my_score: %v", name, u.Object["status"])
	}

	// cluster2 first, alone: the LLM forecast is masked for it.
	c2, stop2 := startAgent(ctx, t, dyn, "cluster2", endpoints, tokens)
	waitFor(ctx, t, "cluster2's scores", func() bool { return len(c2.resources()) >= 6 })
	time.Sleep(2 * time.Second) // the LLM forecast's round would have called the model by now
	stop2()
	if n := model.calls.Load(); n != 0 || c2.latest("llm-forecast-score") != nil {
		t.Fatalf("cluster2 is masked for llm_forecast_score, yet the model was called %d times, scores %v", n, c2.resources())
	}

	c1, stop1 := startAgent(ctx, t, dyn, "cluster1", endpoints, tokens)
	defer stop1()
	want := []string{"ai-workload-perf-score", "ai-workload-power-score", "example-performance-score", "example-powerconsumption-score", "llm-forecast-score", "sample-my-score", "simple-prediction-score"}
	waitFor(ctx, t, "cluster1's scores of every published spec", func() bool { return reflect.DeepEqual(c1.resources(), want) })

	expect := map[string][]contract.Score{
		// The mean of each pod's rate (1.5, 2.5, 3.5 cores) truncated, named ${node};${namespace};${pod}.
		"sample-my-score": {{Name: "worker-1;shop;web-0", Value: 1}, {Name: "worker-1;shop;web-1", Value: 2}, {Name: "worker-1;shop;web-2", Value: 3}},
		// The model's forecast, last value + 1 (2.5, 3.5, 4.5), per pod.
		"llm-forecast-score": {{Name: "worker-1;shop;web-0", Value: 2}, {Name: "worker-1;shop;web-1", Value: 3}, {Name: "worker-1;shop;web-2", Value: 4}},
		// ai-workload's performance table.
		"ai-workload-perf-score": {{Name: "app01;2g.24gb", Value: 10}, {Name: "app01;3g.48gb", Value: 60}, {Name: "app01;all", Value: 80},
			{Name: "app02;2g.24gb", Value: 15}, {Name: "app02;3g.48gb", Value: 55}, {Name: "app02;all", Value: 80}},
		// The static scorer's table, named ${app};${device}.
		"example-performance-score": {{Name: "app01;2g.24gb", Value: 10}, {Name: "app01;3g.48gb", Value: 60}, {Name: "app01;all", Value: 80},
			{Name: "app02;2g.24gb", Value: 15}, {Name: "app02;3g.48gb", Value: 55}, {Name: "app02;all", Value: 80}},
		"example-powerconsumption-score": {{Name: "app01;2g.24gb", Value: 80}, {Name: "app01;3g.48gb", Value: 30}, {Name: "app01;all", Value: 20},
			{Name: "app02;2g.24gb", Value: 90}, {Name: "app02;3g.48gb", Value: 55}, {Name: "app02;all", Value: 10}},
	}
	for resource, scores := range expect {
		got := c1.latest(resource)
		if len(got.Items) != 1 || got.Items[0].Cluster != "cluster1" || !reflect.DeepEqual(got.Items[0].Scores, scores) {
			t.Errorf("%s: %+v, want cluster1 %v", resource, got.Items, scores)
		}
		if got.ValidUntil == nil {
			t.Errorf("%s: no validUntil", resource)
		}
	}
	// ${namespace}: three series, one name: one is kept, as DSF keeps one.
	if p := c1.latest("simple-prediction-score"); len(p.Items) != 1 || len(p.Items[0].Scores) != 1 || p.Items[0].Scores[0].Name != "shop" {
		t.Errorf("simple-prediction-score: %+v, want one score shop", p.Items)
	}
	power := c1.latest("ai-workload-power-score")
	if len(power.Items) != 1 || len(power.Items[0].Scores) != 6 {
		t.Errorf("ai-workload-power-score: %+v, want six app;device scores", power.Items)
	}
	if n := model.calls.Load(); n != 3 {
		t.Errorf("the model was called %d times, want once per pod (3)", n)
	}
	for _, src := range c1.srcs {
		if src != "scoreflow/dsf-bridge/cluster1" {
			t.Errorf("event source %q", src)
		}
	}

	// The administrator removes a scorer: its worker stops.
	if err := dyn.Resource(dsf.ScorersResource).Namespace(hubNamespace).Delete(ctx, "example-performance-scorer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	before := len(c1.sent)
	// The static scorers' interval is 30s: within 35s the remaining ones send again, the removed one not.
	waitFor(ctx, t, "another round of example-powerconsumption-scorer", func() bool {
		c1.mu.Lock()
		defer c1.mu.Unlock()
		for _, s := range c1.sent[before:] {
			if s.Resource == "example-powerconsumption-score" {
				return true
			}
		}
		return false
	})
	c1.mu.Lock()
	for _, s := range c1.sent[before:] {
		if s.Resource == "example-performance-score" {
			t.Errorf("a deleted DynamicScorer still runs")
		}
	}
	c1.mu.Unlock()
}

// startAgent runs an agent for cluster until the returned stop is called (or the test ends).
func startAgent(ctx context.Context, t *testing.T, hub dynamic.Interface, cluster, endpoints string, tokens dsf.Tokens) (*recorder, func()) {
	t.Helper()
	fn := function.New("dsf-bridge", "test")
	fn.Log = slog.New(slog.NewTextHandler(&testLog{t: t, prefix: cluster}, nil))
	eps, err := dsf.ParseEndpoints(endpoints)
	if err != nil {
		t.Fatal(err)
	}
	run, err := dsf.NewRunner(dsf.Options{Settings: dsf.Settings{Endpoints: eps, Tokens: tokens}}, fn.Registry, fn.Log)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	a := &dsf.Agent{Runner: run, Cluster: cluster, Source: "scoreflow/dsf-bridge/" + cluster, Sender: rec, Log: fn.Log}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(actx, hub, hubNamespace) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s's agent: %v", cluster, err)
			}
		})
	}
	t.Cleanup(stop)
	return rec, stop
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

// testLog sends an agent's log lines to the test's log, when the test fails or -v is given.
type testLog struct {
	t      *testing.T
	prefix string
}

func (w *testLog) Write(p []byte) (int, error) {
	w.t.Log(w.prefix + ": " + strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
