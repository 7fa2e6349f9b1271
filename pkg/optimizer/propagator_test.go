package optimizer_test

import (
	"context"
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
