package optimizer_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

// replicas lists the policies replicated into a cluster's namespace from namespace ns (the
// propagator names them <ns>.<policy>).
func replicas(t *testing.T, cluster, ns string) []string {
	t.Helper()
	l, err := dyn.Resource(optimizer.PolicyResource).Namespace(cluster).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range l.Items {
		if strings.HasPrefix(p.GetName(), ns+".") {
			out = append(out, p.GetName())
		}
	}
	sort.Strings(out)
	return out
}

func waitReplicas(t *testing.T, cluster, ns string, want []string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := replicas(t, cluster, ns)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicated into %s: %v, want %v", cluster, got, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// comply sets a replicated policy's compliance, as the managed cluster's status sync reports it.
func comply(t *testing.T, cluster, name string) {
	t.Helper()
	ctx := context.Background()
	r := dyn.Resource(optimizer.PolicyResource).Namespace(cluster)
	p, err := r.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(p.Object, "Compliant", "status", "compliant"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// rootCompliance is what the propagator rolled up into the root policy's status for cluster.
func rootCompliance(t *testing.T, ns, policy, cluster string) string {
	t.Helper()
	p, err := dyn.Resource(optimizer.PolicyResource).Namespace(ns).Get(context.Background(), policy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	per, _, _ := unstructured.NestedSlice(p.Object, "status", "status")
	for _, e := range per {
		m, _ := e.(map[string]any)
		if m["clustername"] == cluster {
			s, _ := m["compliant"].(string)
			return s
		}
	}
	return ""
}

// TestPlanWithRealPropagator: with the real governance policy propagator and placement controller,
// the chosen policy (and only it) is replicated into each chosen cluster's namespace; once the
// replicas report compliance the propagator rolls it up into the root policies, the clusters'
// policy watchers claim compliance, and the workload Placements decide. A power plan moves the
// replicas to the 2g policies and the workloads to the other clusters.
func TestPlanWithRealPropagator(t *testing.T) {
	pp, err := hub.StartPolicyPropagator(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pp.Stop() })
	const ns = "gov"
	demo(t, ns)
	claim(t, "worker01", "")
	claim(t, "worker02", "")
	url := serve(t, optimizer.Options{LowerIsBetter: []string{power}})

	p1 := optimize(t, url, params(ns, perf))
	for _, c := range []string{"worker01", "worker02"} {
		waitReplicas(t, c, ns, []string{ns + ".policy-enable-mig-3g-" + c})
	}
	if exited, err := pp.Exited(); exited {
		t.Fatalf("propagator exited: %v", err)
	}
	for _, app := range []string{"app01", "app02"} {
		if got := decisions(t, ns, app+"-placement"); len(got) != 0 {
			t.Errorf("%s-placement decided %v before compliance", app, got)
		}
	}
	for _, c := range p1.Clusters {
		comply(t, c.Name, ns+"."+c.Policy)
	}
	for _, c := range p1.Clusters {
		deadline := time.Now().Add(30 * time.Second)
		for rootCompliance(t, ns, c.Policy, c.Name) != "Compliant" {
			if time.Now().After(deadline) {
				t.Fatalf("root policy %s: compliance of %s not rolled up", c.Policy, c.Name)
			}
			time.Sleep(200 * time.Millisecond)
		}
		claim(t, c.Name, "compliant") // what the cluster's policy watcher does on compliance
	}
	decided(t, ns, "app01-placement", []string{"worker01"}, 30*time.Second)
	decided(t, ns, "app02-placement", []string{"worker02"}, 30*time.Second)

	optimize(t, url, params(ns, power))
	for _, c := range []string{"worker01", "worker02"} {
		waitReplicas(t, c, ns, []string{ns + ".policy-enable-mig-2g-" + c})
	}
	decided(t, ns, "app01-placement", []string{"worker02"}, 30*time.Second)
	decided(t, ns, "app02-placement", []string{"worker01"}, 30*time.Second)

	status, reply := functest.Send(t, url, request(optimizer.TypeResetRequested, optimizer.ResetRequest{Namespace: ns}))
	if status != http.StatusOK || reply.Type() != optimizer.TypeResetDone {
		t.Fatalf("reset: %d %v", status, reply)
	}
	for _, c := range []string{"worker01", "worker02"} {
		waitReplicas(t, c, ns, nil)
	}
}

// complianceLabel is the Marker's label on a ManagedCluster for namespace ns ("" when absent).
func complianceLabel(t *testing.T, cluster, ns string) string {
	t.Helper()
	mc, err := hub.Cluster.ClusterV1().ManagedClusters().Get(context.Background(), cluster, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return mc.Labels[optimizer.ComplianceLabelPrefix+ns]
}

func waitLabel(t *testing.T, cluster, ns, want string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); complianceLabel(t, cluster, ns) != want; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: compliance label %q, want %q", cluster, complianceLabel(t, cluster, ns), want)
		}
	}
}

// TestComplianceGateWithRealPropagator: with MarkCompliance, nothing but the hub is needed for the
// gate. The real propagator replicates each chosen policy; the Marker (running as in the optimizer
// process) labels a cluster only once its replica reports Compliant and the propagator rolls that
// up into the root policy; each workload Placement decides exactly then, cluster by cluster. A
// new plan's policies are not compliant yet: the old labels go, and the moved workloads wait for
// the new replicas' compliance.
func TestComplianceGateWithRealPropagator(t *testing.T) {
	pp, err := hub.StartPolicyPropagator(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pp.Stop() })
	const ns = "gate"
	demo(t, ns)
	// A compliance claim would open the old gate; the label gate must not care.
	claim(t, "worker01", "compliant")
	claim(t, "worker02", "compliant")
	t.Cleanup(func() { claim(t, "worker01", ""); claim(t, "worker02", "") })
	url := serve(t, optimizer.Options{LowerIsBetter: []string{power}, MarkCompliance: true})
	ctx, cancel := context.WithCancel(context.Background())
	mk := &optimizer.Marker{Cluster: hub.Cluster, Dynamic: dyn, Namespaces: []string{ns}, Log: slog.New(slog.NewJSONHandler(io.Discard, nil))}
	done := make(chan struct{})
	go func() { mk.Run(ctx, 100*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	p1 := optimize(t, url, params(ns, perf))
	for _, c := range []string{"worker01", "worker02"} {
		waitReplicas(t, c, ns, []string{ns + ".policy-enable-mig-3g-" + c})
	}
	// Replicated but not compliant: the Marker has synced many times, and nothing decides.
	time.Sleep(2 * time.Second)
	for _, app := range []string{"app01", "app02"} {
		if got := decisions(t, ns, app+"-placement"); len(got) != 0 {
			t.Errorf("%s-placement decided %v before compliance", app, got)
		}
	}
	for _, c := range []string{"worker01", "worker02"} {
		if l := complianceLabel(t, c, ns); l != "" {
			t.Errorf("%s labelled %q before compliance", c, l)
		}
	}
	// worker01 complies: only its workload lands.
	comply(t, "worker01", ns+"."+policyOf(p1, "worker01").Policy)
	waitLabel(t, "worker01", ns, policyOf(p1, "worker01").Policy)
	decided(t, ns, "app01-placement", []string{"worker01"}, 30*time.Second)
	if got := decisions(t, ns, "app02-placement"); len(got) != 0 {
		t.Errorf("app02-placement decided %v before worker02 complied", got)
	}
	comply(t, "worker02", ns+"."+policyOf(p1, "worker02").Policy)
	decided(t, ns, "app02-placement", []string{"worker02"}, 30*time.Second)

	// The power plan binds the 2g policies: the 3g labels go, and the moved workloads wait.
	p2 := optimize(t, url, params(ns, power))
	for _, c := range []string{"worker01", "worker02"} {
		waitReplicas(t, c, ns, []string{ns + ".policy-enable-mig-2g-" + c})
		waitLabel(t, c, ns, "")
	}
	decided(t, ns, "app01-placement", nil, 30*time.Second)
	decided(t, ns, "app02-placement", nil, 30*time.Second)
	for _, c := range []string{"worker01", "worker02"} {
		comply(t, c, ns+"."+policyOf(p2, c).Policy)
	}
	decided(t, ns, "app01-placement", []string{"worker02"}, 30*time.Second)
	decided(t, ns, "app02-placement", []string{"worker01"}, 30*time.Second)
}
