package optimizer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	workclient "open-cluster-management.io/api/client/work/clientset/versioned"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"
	workv1alpha1 "open-cluster-management.io/api/work/v1alpha1"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

var (
	hub *localhub.Hub
	dyn dynamic.Interface
	wk  workclient.Interface
)

func TestMain(m *testing.M) {
	code := func() int {
		var err error
		if hub, err = localhub.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer hub.Stop()
		if err := hub.InstallWorkloadCRDs(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		dyn = dynamic.NewForConfigOrDie(hub.Config)
		wk = workclient.NewForConfigOrDie(hub.Config)
		pc, err := hub.StartPlacementController(nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer pc.Stop()
		return m.Run()
	}()
	os.Exit(code)
}

const (
	clusterSet = "optimizer-set"
	perf       = "demo-performance-score"
	power      = "demo-powerconsumption-score"
)

// demo sets up the seed's example in namespace ns: clusters worker01 and worker02 (in a cluster
// set bound to ns), three MIG policies per cluster (2g supplies 3 GPU slices, 3g 2, none 1),
// two workloads demanding 2 each, and scores. Performance puts app01 on worker01 and app02 on
// worker02, both on 3g; power consumption (lower is better) swaps them, both on 2g.
func demo(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	must(t, hub.AddClusterSet(ctx, clusterSet, ns))
	for _, c := range []string{"worker01", "worker02"} {
		must(t, hub.AddCluster(ctx, c, map[string]string{localhub.ClusterSetLabel: clusterSet}))
		must(t, hub.MarkAvailable(ctx, c))
		for _, p := range []struct {
			name, device string
			supply       int
		}{{"policy-enable-mig-2g-" + c, "2g", 3}, {"policy-enable-mig-3g-" + c, "3g", 2}, {"policy-disable-mig-" + c, "all", 1}} {
			createPolicy(t, ns, p.name, map[string]string{
				optimizer.LabelSupplyKind: "gpu", optimizer.LabelSupplyAmount: fmt.Sprint(p.supply), optimizer.LabelSupplyDevice: p.device,
			})
		}
	}
	for _, app := range []string{"app01", "app02"} {
		createWorkload(t, ns, "mwrs-"+app, app+"-placement", map[string]string{
			optimizer.LabelApp: app, optimizer.LabelRequestKind: "gpu", optimizer.LabelRequestAmount: "2",
		})
	}
	setScores(t, "worker01", perf, map[string]int32{"app01;3g": 90, "app01;2g": 50, "app01;all": 70, "app02;3g": 60, "app02;2g": 40, "app02;all": 55})
	setScores(t, "worker02", perf, map[string]int32{"app01;3g": 60, "app01;2g": 40, "app01;all": 55, "app02;3g": 90, "app02;2g": 50, "app02;all": 70})
	setScores(t, "worker01", power, map[string]int32{"app01;3g": 80, "app01;2g": 30, "app01;all": 90, "app02;3g": 80, "app02;2g": 10, "app02;all": 90})
	setScores(t, "worker02", power, map[string]int32{"app01;3g": 80, "app01;2g": 10, "app01;all": 90, "app02;3g": 80, "app02;2g": 30, "app02;all": 90})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func createPolicy(t *testing.T, ns, name string, labels map[string]string) {
	t.Helper()
	p := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policy.open-cluster-management.io/v1", "kind": "Policy",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{"disabled": false, "remediationAction": "inform", "policy-templates": []any{map[string]any{
			"objectDefinition": map[string]any{
				"apiVersion": "policy.open-cluster-management.io/v1", "kind": "ConfigurationPolicy",
				"metadata": map[string]any{"name": name},
				"spec":     map[string]any{"remediationAction": "inform", "severity": "low", "object-templates": []any{}},
			},
		}}},
	}}
	p.SetLabels(labels)
	_, err := dyn.Resource(optimizer.PolicyResource).Namespace(ns).Create(context.Background(), p, metav1.CreateOptions{})
	must(t, err)
}

func createWorkload(t *testing.T, ns, name, placement string, labels map[string]string) {
	t.Helper()
	_, err := wk.WorkV1alpha1().ManifestWorkReplicaSets(ns).Create(context.Background(), &workv1alpha1.ManifestWorkReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: workv1alpha1.ManifestWorkReplicaSetSpec{
			PlacementRefs: []workv1alpha1.LocalPlacementReference{{Name: placement}},
		},
	}, metav1.CreateOptions{})
	must(t, err)
}

func setScores(t *testing.T, cluster, resource string, scores map[string]int32) {
	t.Helper()
	ctx := context.Background()
	aps := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(cluster)
	obj, err := aps.Get(ctx, resource, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		obj, err = aps.Create(ctx, &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: resource, Namespace: cluster}}, metav1.CreateOptions{})
	}
	must(t, err)
	obj.Status.Scores = nil
	names := make([]string, 0, len(scores))
	for n := range scores {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		obj.Status.Scores = append(obj.Status.Scores, clusterv1alpha1.AddOnPlacementScoreItem{Name: n, Value: scores[n]})
	}
	_, err = aps.UpdateStatus(ctx, obj, metav1.UpdateOptions{})
	must(t, err)
}

// claim sets (value != "") or clears the compliance ClusterClaim on a cluster, as the cluster's
// registration agent would sync it from a policy watcher's ClusterClaim.
func claim(t *testing.T, cluster, value string) {
	t.Helper()
	ctx := context.Background()
	mc, err := hub.Cluster.ClusterV1().ManagedClusters().Get(ctx, cluster, metav1.GetOptions{})
	must(t, err)
	mc.Status.ClusterClaims = nil
	if value != "" {
		mc.Status.ClusterClaims = []clusterv1.ManagedClusterClaim{{Name: "policy-watcher-claim", Value: value}}
	}
	_, err = hub.Cluster.ClusterV1().ManagedClusters().UpdateStatus(ctx, mc, metav1.UpdateOptions{})
	must(t, err)
}

// testNamespaces are the namespaces the tests plan in: an optimizer served with no Namespaces of
// its own may act in these.
var testNamespaces = []string{"flip", "redeliver", "refuse", "http", "gov", "gate", "race"}

// serve runs the optimizer function's HTTP surface in process against the hub.
func serve(t *testing.T, opts optimizer.Options) string {
	t.Helper()
	fn := function.New("optimizer", "test")
	fn.Log = slog.New(slog.NewJSONHandler(io.Discard, nil))
	if opts.TimeLimit == 0 {
		opts.TimeLimit = 10 * time.Second
	}
	if opts.ComplianceClaim == "" {
		opts.ComplianceClaim, opts.ComplianceValue = "policy-watcher-claim", "compliant"
	}
	if opts.Namespaces == nil {
		opts.Namespaces = testNamespaces
	}
	o := &optimizer.Optimizer{Cluster: hub.Cluster, Work: wk, Dynamic: dyn, Opts: opts}
	h := &optimizer.Handler{Optimizer: o, Source: fn.Source(), Log: fn.Log}
	srv := httptest.NewServer(h.Mux(fn.Handler(h.Handle, h.FailureReply)))
	t.Cleanup(srv.Close)
	return srv.URL
}

func request(typ string, data any) event.Event {
	e := cloudevents.NewEvent()
	e.SetID(uuid.NewString())
	e.SetSource("test/optimizer")
	e.SetType(typ)
	e.SetTime(time.Now())
	_ = e.SetData(cloudevents.ApplicationJSON, data)
	return e
}

func params(ns, score string) optimizer.Params {
	p := optimizer.Params{Namespace: ns, Preference: optimizer.Preference{AddonPlacementScore: score, ScoreDimensionFormat: "${app};${device}"}}
	for _, c := range []string{"worker01", "worker02"} {
		p.Clusters = append(p.Clusters, optimizer.Cluster{Name: c, AvailablePolicies: []optimizer.Named{
			{Name: "policy-enable-mig-2g-" + c}, {Name: "policy-enable-mig-3g-" + c}, {Name: "policy-disable-mig-" + c},
		}})
	}
	p.TargetWorkloads = []optimizer.Named{{Name: "mwrs-app01"}, {Name: "mwrs-app02"}}
	return p
}

// optimize sends the request event and returns the plan from optimize.done.
func optimize(t *testing.T, url string, p optimizer.Params) *optimizer.Plan {
	t.Helper()
	status, reply := functest.Send(t, url, request(optimizer.TypeRequested, p))
	if status != http.StatusOK || reply == nil || reply.Type() != optimizer.TypeDone {
		t.Fatalf("status %d, reply %v", status, reply)
	}
	var plan optimizer.Plan
	if err := json.Unmarshal(reply.Data(), &plan); err != nil {
		t.Fatal(err)
	}
	return &plan
}

// decided waits until the placement controller's decision for namespace/placement is want (nil:
// no cluster), or fails after a while.
func decided(t *testing.T, ns, placement string, want []string, within time.Duration) {
	t.Helper()
	var got []string
	deadline := time.Now().Add(within)
	for {
		got = decisions(t, ns, placement)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("placement %s/%s decided %v, want %v", ns, placement, got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func decisions(t *testing.T, ns, placement string) []string {
	t.Helper()
	l, err := hub.Cluster.ClusterV1beta1().PlacementDecisions(ns).List(context.Background(), metav1.ListOptions{LabelSelector: clusterv1beta1.PlacementLabel + "=" + placement})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range l.Items {
		for _, c := range d.Status.Decisions {
			out = append(out, c.ClusterName)
		}
	}
	sort.Strings(out)
	return out
}

func clusterOf(plan *optimizer.Plan, workload string) string {
	for _, w := range plan.Workloads {
		if w.Name == workload {
			return w.Cluster
		}
	}
	return ""
}

func policyOf(plan *optimizer.Plan, cluster string) optimizer.PlannedCluster {
	for _, c := range plan.Clusters {
		if c.Name == cluster {
			return c
		}
	}
	return optimizer.PlannedCluster{}
}

func bindingNames(t *testing.T, ns string) []string {
	t.Helper()
	l, err := dyn.Resource(optimizer.PlacementBindingResource).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, b := range l.Items {
		out = append(out, b.GetName())
	}
	sort.Strings(out)
	return out
}

func placementNames(t *testing.T, ns string) []string {
	t.Helper()
	l, err := hub.Cluster.ClusterV1beta1().Placements(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range l.Items {
		out = append(out, p.Name)
	}
	sort.Strings(out)
	return out
}

// TestPlanDecidesAndFlips: the performance plan gives both clusters their 3g policy and puts
// app01 on worker01, app02 on worker02; the real placement controller puts each policy's
// Placement on its cluster at once, and each workload's Placement (the one its
// ManifestWorkReplicaSet follows) on its cluster only once the cluster claims compliance. A power
// plan (lower is better) then replaces the policy Placements and bindings, and the workload
// decisions flip.
func TestPlanDecidesAndFlips(t *testing.T) {
	const ns = "flip"
	demo(t, ns)
	claim(t, "worker01", "")
	claim(t, "worker02", "")
	url := serve(t, optimizer.Options{LowerIsBetter: []string{power}})

	p1 := optimize(t, url, params(ns, perf))
	if !p1.Optimal || p1.Objective != 180 || p1.Preference.Goal != optimizer.GoalMaximize {
		t.Errorf("performance plan: optimal %v, objective %v, goal %s; want optimal 180 maximize", p1.Optimal, p1.Objective, p1.Preference.Goal)
	}
	for _, c := range []string{"worker01", "worker02"} {
		if got := policyOf(p1, c).Policy; got != "policy-enable-mig-3g-"+c {
			t.Errorf("performance: %s gets %s, want its 3g policy", c, got)
		}
	}
	if clusterOf(p1, "mwrs-app01") != "worker01" || clusterOf(p1, "mwrs-app02") != "worker02" {
		t.Fatalf("performance: workloads %+v", p1.Workloads)
	}
	for _, c := range p1.Clusters {
		decided(t, ns, c.Placement, []string{c.Name}, 30*time.Second)
	}
	want := []string{policyOf(p1, "worker01").Binding, policyOf(p1, "worker02").Binding}
	if got := bindingNames(t, ns); !slices.Equal(got, want) {
		t.Errorf("bindings %v, want %v", got, want)
	}
	// The policy Placements decided; the workloads' must wait for compliance.
	time.Sleep(2 * time.Second)
	for _, app := range []string{"app01", "app02"} {
		if got := decisions(t, ns, app+"-placement"); len(got) != 0 {
			t.Errorf("%s-placement decided %v before any cluster claimed compliance", app, got)
		}
	}
	claim(t, "worker01", "compliant")
	claim(t, "worker02", "compliant")
	decided(t, ns, "app01-placement", []string{"worker01"}, 30*time.Second)
	decided(t, ns, "app02-placement", []string{"worker02"}, 30*time.Second)

	p2 := optimize(t, url, params(ns, power))
	if !p2.Optimal || p2.Objective != 20 || p2.Preference.Goal != optimizer.GoalMinimize {
		t.Errorf("power plan: optimal %v, objective %v, goal %s; want optimal 20 minimize", p2.Optimal, p2.Objective, p2.Preference.Goal)
	}
	if clusterOf(p2, "mwrs-app01") != "worker02" || clusterOf(p2, "mwrs-app02") != "worker01" {
		t.Fatalf("power: workloads %+v", p2.Workloads)
	}
	for _, c := range []string{"worker01", "worker02"} {
		if got := policyOf(p2, c).Policy; got != "policy-enable-mig-2g-"+c {
			t.Errorf("power: %s gets %s, want its 2g policy", c, got)
		}
	}
	decided(t, ns, "app01-placement", []string{"worker02"}, 30*time.Second)
	decided(t, ns, "app02-placement", []string{"worker01"}, 30*time.Second)
	for _, c := range p2.Clusters {
		decided(t, ns, c.Placement, []string{c.Name}, 30*time.Second)
	}
	// The first plan's policy Placements and bindings are gone; the workload Placements stayed.
	want = []string{policyOf(p2, "worker01").Binding, policyOf(p2, "worker02").Binding}
	if got := bindingNames(t, ns); !slices.Equal(got, want) {
		t.Errorf("bindings after the power plan %v, want %v", got, want)
	}
	wantP := []string{"app01-placement", "app02-placement", policyOf(p2, "worker01").Placement, policyOf(p2, "worker02").Placement}
	sort.Strings(wantP)
	if got := placementNames(t, ns); !slices.Equal(got, wantP) {
		t.Errorf("placements after the power plan %v, want %v", got, wantP)
	}
	if len(p2.Removed) != 4 {
		t.Errorf("removed %v, want the first plan's two policy Placements and two bindings", p2.Removed)
	}

	// Reset removes everything generated.
	status, reply := functest.Send(t, url, request(optimizer.TypeResetRequested, optimizer.ResetRequest{Namespace: ns}))
	if status != http.StatusOK || reply.Type() != optimizer.TypeResetDone {
		t.Fatalf("reset: %d %v", status, reply)
	}
	if got := placementNames(t, ns); len(got) != 0 {
		t.Errorf("placements after reset: %v", got)
	}
	if got := bindingNames(t, ns); len(got) != 0 {
		t.Errorf("bindings after reset: %v", got)
	}
}

// TestRedeliveryIsIdempotent: the same request event delivered twice applies the same plan (same
// id, same objects), not a second one.
func TestRedeliveryIsIdempotent(t *testing.T) {
	const ns = "redeliver"
	demo(t, ns)
	url := serve(t, optimizer.Options{})
	e := request(optimizer.TypeRequested, params(ns, perf))
	var ids []string
	for i := 0; i < 2; i++ {
		status, reply := functest.Send(t, url, e)
		if status != http.StatusOK {
			t.Fatalf("delivery %d: %d %v", i+1, status, reply)
		}
		var plan optimizer.Plan
		if err := json.Unmarshal(reply.Data(), &plan); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, plan.ID)
		if len(plan.Removed) != 0 {
			t.Errorf("delivery %d removed %v", i+1, plan.Removed)
		}
	}
	if ids[0] != ids[1] {
		t.Errorf("plan ids %v differ", ids)
	}
	if got := bindingNames(t, ns); len(got) != 2 {
		t.Errorf("bindings %v, want 2", got)
	}
}

// TestRefusals: bad requests get a 4xx optimize.failed with the reason, a body well under 700
// bytes, and change nothing on the hub.
func TestRefusals(t *testing.T) {
	const ns = "refuse"
	demo(t, ns)
	createWorkload(t, ns, "mwrs-huge", "huge-placement", map[string]string{optimizer.LabelApp: "app01", optimizer.LabelRequestKind: "gpu", optimizer.LabelRequestAmount: "9"})
	createWorkload(t, ns, "mwrs-unlabelled", "x-placement", map[string]string{optimizer.LabelApp: "app01"})
	createWorkload(t, ns, "mwrs-noscore", "y-placement", map[string]string{optimizer.LabelApp: "app99", optimizer.LabelRequestKind: "gpu", optimizer.LabelRequestAmount: "1"})
	url := serve(t, optimizer.Options{})
	with := func(f func(p *optimizer.Params)) optimizer.Params { p := params(ns, perf); f(&p); return p }
	for _, tt := range []struct {
		name   string
		data   any
		status int
		reason contract.Reason
	}{
		{"not JSON", "nope", 400, contract.ReasonInvalidData},
		{"unknown field", map[string]any{"namespace": ns, "clusterz": []any{}}, 400, contract.ReasonInvalidData},
		{"no clusters", with(func(p *optimizer.Params) { p.Clusters = nil }), 400, contract.ReasonInvalidData},
		{"bad format", with(func(p *optimizer.Params) { p.Preference.ScoreDimensionFormat = "${app};${node}" }), 400, contract.ReasonInvalidData},
		{"unknown cluster", with(func(p *optimizer.Params) { p.Clusters[0].Name = "worker99" }), 422, optimizer.ReasonUnknownObject},
		{"unknown policy", with(func(p *optimizer.Params) { p.Clusters[0].AvailablePolicies[0].Name = "nope" }), 422, optimizer.ReasonUnknownObject},
		{"unknown workload", with(func(p *optimizer.Params) { p.TargetWorkloads[0].Name = "nope" }), 422, optimizer.ReasonUnknownObject},
		{"workload without demand labels", with(func(p *optimizer.Params) { p.TargetWorkloads[0].Name = "mwrs-unlabelled" }), 422, optimizer.ReasonInvalidObject},
		{"no such score resource", with(func(p *optimizer.Params) { p.Preference.AddonPlacementScore = "no-such-score" }), 422, optimizer.ReasonMissingScores},
		{"no score for an app", with(func(p *optimizer.Params) { p.TargetWorkloads[0].Name = "mwrs-noscore" }), 422, optimizer.ReasonMissingScores},
		{"demand beyond supply", with(func(p *optimizer.Params) { p.TargetWorkloads[0].Name = "mwrs-huge" }), 422, optimizer.ReasonInfeasible},
		{"together beyond supply", with(func(p *optimizer.Params) {
			p.Clusters = p.Clusters[:1]
		}), 422, optimizer.ReasonInfeasible},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := request(optimizer.TypeRequested, tt.data)
			status, reply := functest.Send(t, url, e)
			if status != tt.status || reply == nil || reply.Type() != optimizer.TypeFailed {
				t.Fatalf("status %d reply %v, want %d %s", status, reply, tt.status, optimizer.TypeFailed)
			}
			if n := len(reply.Data()); n >= 700 {
				t.Errorf("body %d bytes", n)
			}
			var f optimizer.Failure
			if err := json.Unmarshal(reply.Data(), &f); err != nil {
				t.Fatal(err)
			}
			if f.Reason != tt.reason || f.Input == nil || f.Input.ID != e.ID() {
				t.Errorf("failure %+v, want reason %s for input %s", f, tt.reason, e.ID())
			}
			if got := placementNames(t, ns); len(got) != 0 {
				t.Errorf("a refused request left placements %v", got)
			}
		})
	}
	t.Run("long attributes and message stay under 700 bytes", func(t *testing.T) {
		e := request(optimizer.TypeRequested, with(func(p *optimizer.Params) { p.TargetWorkloads[0].Name = strings.Repeat("w", 253) }))
		e.SetSource("test/" + strings.Repeat("s", 2000))
		e.SetID(strings.Repeat("i", 2000))
		status, reply := functest.Send(t, url, e)
		// The function runtime refuses over-long CloudEvents attributes before the optimizer reads
		// the request: 400, with a failure event still under the dispatcher's limit.
		if status != 400 || reply == nil || len(reply.Data()) >= 700 {
			t.Fatalf("status %d, body %d bytes", status, len(reply.Data()))
		}
	})
	t.Run("wrong type", func(t *testing.T) {
		status, reply := functest.Send(t, url, request("io.scoreflow.other", map[string]any{}))
		if status != 400 || reply == nil || reply.Type() != optimizer.TypeFailed {
			t.Fatalf("status %d reply %v", status, reply)
		}
	})
	t.Run("not a CloudEvent", func(t *testing.T) {
		resp, err := http.Post(url, "text/plain", strings.NewReader("hello"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 400 || resp.Header.Get("Ce-Type") != optimizer.TypeFailed {
			t.Errorf("status %d type %q", resp.StatusCode, resp.Header.Get("Ce-Type"))
		}
	})
	t.Run("foreign Placement not overwritten", func(t *testing.T) {
		_, err := hub.Cluster.ClusterV1beta1().Placements(ns).Create(context.Background(), &clusterv1beta1.Placement{ObjectMeta: metav1.ObjectMeta{Name: "app01-placement", Namespace: ns}}, metav1.CreateOptions{})
		must(t, err)
		defer hub.Cluster.ClusterV1beta1().Placements(ns).Delete(context.Background(), "app01-placement", metav1.DeleteOptions{})
		status, reply := functest.Send(t, url, request(optimizer.TypeRequested, params(ns, perf)))
		if status != 409 || reply.Type() != optimizer.TypeFailed {
			t.Fatalf("status %d reply %v", status, reply)
		}
		if got := placementNames(t, ns); !slices.Equal(got, []string{"app01-placement"}) {
			t.Errorf("placements %v: the refused plan wrote something", got)
		}
	})
}

// TestOptimizeHTTP: POST /optimize takes the params document and answers the plan as JSON, as
// DSF's API does; its refusals are JSON with the reason, under 700 bytes; POST /reset removes.
func TestOptimizeHTTP(t *testing.T) {
	const ns = "http"
	demo(t, ns)
	url := serve(t, optimizer.Options{})
	body, _ := json.Marshal(params(ns, perf))
	resp, err := http.Post(url+"/optimize", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	var plan optimizer.Plan
	err = json.NewDecoder(resp.Body).Decode(&plan)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || plan.Objective != 180 || len(plan.Placements) != 4 {
		t.Fatalf("status %d err %v plan %+v", resp.StatusCode, err, plan)
	}
	resp, err = http.Post(url+"/optimize", "application/json", strings.NewReader(`{"namespace":"`+ns+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || len(raw) >= 700 || !strings.Contains(string(raw), `"InvalidData"`) {
		t.Errorf("bad request: %d %s", resp.StatusCode, raw)
	}
	resp, err = http.Post(url+"/reset", "application/json", strings.NewReader(`{"namespace":"`+ns+`","plan":"`+plan.ID+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	var res optimizer.ResetResult
	_ = json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(res.Removed) != 6 {
		t.Errorf("reset: %d %+v, want 4 Placements and 2 bindings removed", resp.StatusCode, res)
	}
}
