package optimizer_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

// An optimizer acts only in the namespaces its deployment lists: a request naming another is
// refused 400 Forbidden before anything is read (the optimizer below has no hub client at all, so
// any read would crash it) or written (the real hub's objects there stay as they were).
func TestOnlyTheDeploymentsNamespaces(t *testing.T) {
	ctx := context.Background()
	bare := &optimizer.Optimizer{Opts: optimizer.Options{Namespaces: []string{"team-a"}}}
	for _, ns := range []string{"kube-system", "team-b", "scoreflow"} {
		if _, ferr := bare.Optimize(ctx, &optimizer.Params{Namespace: ns}, "x"); ferr == nil || ferr.Status != 400 || ferr.Reason != contract.ReasonForbidden {
			t.Errorf("optimize in %s: %v, want 400 Forbidden", ns, ferr)
		}
		if _, ferr := bare.Reset(ctx, &optimizer.ResetRequest{Namespace: ns}); ferr == nil || ferr.Status != 400 || ferr.Reason != contract.ReasonForbidden {
			t.Errorf("reset in %s: %v, want 400 Forbidden", ns, ferr)
		}
	}
	if _, ferr := (&optimizer.Optimizer{}).Reset(ctx, &optimizer.ResetRequest{Namespace: "team-a"}); ferr == nil || ferr.Reason != contract.ReasonForbidden {
		t.Errorf("an optimizer with no namespaces reset team-a: %v", ferr)
	}

	const mine, theirs = "authz-mine", "authz-theirs"
	demo(t, mine)
	demo(t, theirs)
	url := serve(t, optimizer.Options{Namespaces: []string{mine}})
	// A plan in theirs, made by another optimizer (one allowed there): what a reset of theirs
	// would delete.
	other := serve(t, optimizer.Options{Namespaces: []string{theirs}})
	optimize(t, other, params(theirs, perf))
	before, beforeBindings := placementNames(t, theirs), bindingNames(t, theirs)
	if len(before) != 4 || len(beforeBindings) != 2 {
		t.Fatalf("the other optimizer's plan: placements %v, bindings %v", before, beforeBindings)
	}
	for _, e := range []struct {
		typ  string
		data any
	}{
		{optimizer.TypeRequested, params(theirs, power)},
		{optimizer.TypeResetRequested, optimizer.ResetRequest{Namespace: theirs}},
		{optimizer.TypeResetRequested, optimizer.ResetRequest{Namespace: "kube-system"}},
	} {
		status, reply := functest.Send(t, url, request(e.typ, e.data))
		if status != http.StatusBadRequest || reply == nil || reply.Type() != optimizer.TypeFailed {
			t.Fatalf("%s %v: status %d reply %v, want 400 optimize.failed", e.typ, e.data, status, reply)
		}
		var f optimizer.Failure
		if err := json.Unmarshal(reply.Data(), &f); err != nil || f.Reason != contract.ReasonForbidden || f.Retriable {
			t.Errorf("%s: failure %+v (%v), want Forbidden, not retriable", e.typ, f, err)
		}
	}
	if got, gotBindings := placementNames(t, theirs), bindingNames(t, theirs); !slices.Equal(got, before) || !slices.Equal(gotBindings, beforeBindings) {
		t.Errorf("after refused requests, %s holds placements %v and bindings %v; want %v and %v", theirs, got, gotBindings, before, beforeBindings)
	}
	// Its own namespace it plans in as before.
	if p := optimize(t, url, params(mine, perf)); len(p.Placements) != 4 {
		t.Errorf("plan in %s: %+v", mine, p)
	}
}

// A reset deletes only what the optimizer wrote: a Placement or PlacementBinding that merely
// carries its labels (copied from a generated one, say) stays, and so does the ManifestWorkReplicaSet's
// Placement the user wrote. The same label does not make the next plan overwrite a Placement.
func TestResetDeletesOnlyWhatTheOptimizerWrote(t *testing.T) {
	ctx := context.Background()
	const ns = "authz-reset"
	demo(t, ns)
	url := serve(t, optimizer.Options{Namespaces: []string{ns}})
	labels := map[string]string{optimizer.LabelGenerated: "true", optimizer.LabelPlan: "copied"}
	copied := &clusterv1beta1.Placement{ObjectMeta: metav1.ObjectMeta{Name: "team-placement", Namespace: ns, Labels: labels},
		Spec: clusterv1beta1.PlacementSpec{ClusterSets: []string{clusterSet}}}
	_, err := hub.Cluster.ClusterV1beta1().Placements(ns).Create(ctx, copied, metav1.CreateOptions{})
	must(t, err)
	binding := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": optimizer.PlacementBindingResource.GroupVersion().String(), "kind": "PlacementBinding",
		"metadata":     map[string]any{"name": "team-binding", "namespace": ns},
		"placementRef": map[string]any{"name": "team-placement", "kind": "Placement", "apiGroup": clusterv1beta1.GroupName},
		"subjects":     []any{map[string]any{"name": "policy-enable-mig-2g-worker01", "kind": "Policy", "apiGroup": optimizer.PolicyResource.Group}},
	}}
	binding.SetLabels(map[string]string{optimizer.LabelGenerated: "true", optimizer.LabelPlan: "copied", optimizer.LabelCluster: "worker01"})
	_, err = dyn.Resource(optimizer.PlacementBindingResource).Namespace(ns).Create(ctx, binding, metav1.CreateOptions{})
	must(t, err)

	plan := optimize(t, url, params(ns, perf))
	status, reply := functest.Send(t, url, request(optimizer.TypeResetRequested, optimizer.ResetRequest{Namespace: ns}))
	if status != http.StatusOK || reply == nil {
		t.Fatalf("reset: %d %v", status, reply)
	}
	var res optimizer.ResetResult
	if err := json.Unmarshal(reply.Data(), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Removed) != len(plan.Placements)+len(plan.PlacementBindings) || slices.ContainsFunc(res.Removed, func(s string) bool { return strings.Contains(s, "team-") }) {
		t.Errorf("reset removed %v; want the plan's %v and %v only", res.Removed, plan.Placements, plan.PlacementBindings)
	}
	if got, bs := placementNames(t, ns), bindingNames(t, ns); !slices.Equal(got, []string{"team-placement"}) || !slices.Equal(bs, []string{"team-binding"}) {
		t.Errorf("after the reset: placements %v, bindings %v; want the copies only", got, bs)
	}

	// A workload's Placement that only carries the labels is not the optimizer's to rewrite.
	mine := copied.DeepCopy()
	mine.Name = "app01-placement"
	_, err = hub.Cluster.ClusterV1beta1().Placements(ns).Create(ctx, mine, metav1.CreateOptions{})
	must(t, err)
	if status, reply := functest.Send(t, url, request(optimizer.TypeRequested, params(ns, perf))); status != http.StatusConflict {
		t.Errorf("a plan over a labelled user Placement: %d %v, want 409", status, reply)
	}
	if p, err := hub.Cluster.ClusterV1beta1().Placements(ns).Get(ctx, "app01-placement", metav1.GetOptions{}); err != nil || len(p.Spec.Predicates) != 0 {
		t.Errorf("the user's Placement was rewritten: %+v (%v)", p.Spec, err)
	}
}

// The compliance marker labels a ManagedCluster only for a binding the optimizer wrote in a
// namespace it acts in: named after its cluster and plan, bound to that plan's Placement selecting
// exactly that cluster. A binding merely labelled generated, or one in another namespace, labels
// nothing; and the marker leaves other namespaces' compliance labels alone.
func TestMarkerTrustsOnlyTheOptimizersBindings(t *testing.T) {
	ctx := context.Background()
	const ns, elsewhere = "authz-mark", "authz-mark-other"
	demo(t, ns)
	demo(t, elsewhere)
	const policy = "policy-enable-mig-2g-worker01"
	for _, n := range []string{ns, elsewhere} {
		p, err := dyn.Resource(optimizer.PolicyResource).Namespace(n).Get(ctx, policy, metav1.GetOptions{})
		must(t, err)
		_ = unstructured.SetNestedSlice(p.Object, []any{map[string]any{"clustername": "worker01", "clusternamespace": "worker01", "compliant": "Compliant"}}, "status", "status")
		_, err = dyn.Resource(optimizer.PolicyResource).Namespace(n).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		must(t, err)
	}
	// Another optimizer's label (or an administrator's) on worker02, in a namespace this one does
	// not act in.
	foreign := optimizer.ComplianceLabelPrefix + "someone-else"
	patch := `{"metadata":{"labels":{"` + foreign + `":"theirs"}}}`
	_, err := hub.Cluster.ClusterV1().ManagedClusters().Patch(ctx, "worker02", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err)
	t.Cleanup(func() {
		for _, c := range []string{"worker01", "worker02"} {
			p := `{"metadata":{"labels":{"` + foreign + `":null,"` + optimizer.ComplianceLabelPrefix + ns + `":null}}}`
			_, _ = hub.Cluster.ClusterV1().ManagedClusters().Patch(context.Background(), c, types.MergePatchType, []byte(p), metav1.PatchOptions{})
		}
	})

	bind := func(n, name, placement, plan string) {
		b := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": optimizer.PlacementBindingResource.GroupVersion().String(), "kind": "PlacementBinding",
			"metadata":     map[string]any{"name": name, "namespace": n},
			"placementRef": map[string]any{"name": placement, "kind": "Placement", "apiGroup": clusterv1beta1.GroupName},
			"subjects":     []any{map[string]any{"name": policy, "kind": "Policy", "apiGroup": optimizer.PolicyResource.Group}},
		}}
		b.SetLabels(map[string]string{optimizer.LabelGenerated: "true", optimizer.LabelPlan: plan, optimizer.LabelCluster: "worker01"})
		_, err := dyn.Resource(optimizer.PlacementBindingResource).Namespace(n).Create(ctx, b, metav1.CreateOptions{})
		must(t, err)
	}
	place := func(n, name, plan string, predicates []clusterv1beta1.ClusterPredicate) {
		one := int32(1)
		_, err := hub.Cluster.ClusterV1beta1().Placements(n).Create(ctx, &clusterv1beta1.Placement{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n, Labels: map[string]string{optimizer.LabelGenerated: "true", optimizer.LabelPlan: plan}},
			Spec:       clusterv1beta1.PlacementSpec{NumberOfClusters: &one, Predicates: predicates}}, metav1.CreateOptions{})
		must(t, err)
	}
	byName := func(c string) []clusterv1beta1.ClusterPredicate {
		return []clusterv1beta1.ClusterPredicate{{RequiredClusterSelector: clusterv1beta1.ClusterSelector{
			CelSelector: clusterv1beta1.ClusterCelSelector{CelExpressions: []string{`managedCluster.metadata.name == "` + c + `"`}}}}}
	}
	// Labelled generated, named as nothing the optimizer derives.
	bind(ns, "forged", "team-placement", "p1")
	// Named as the optimizer names them, but the plan's Placement selects another cluster.
	bind(ns, "binding-worker01-p2", "placement-worker01-p2", "p2")
	place(ns, "placement-worker01-p2", "p2", byName("worker02"))
	// As the optimizer writes them, in a namespace this optimizer does not act in.
	bind(elsewhere, "binding-worker01-p3", "placement-worker01-p3", "p3")
	place(elsewhere, "placement-worker01-p3", "p3", byName("worker01"))

	mk := &optimizer.Marker{Cluster: hub.Cluster, Dynamic: dyn, Namespaces: []string{ns}, Log: slog.New(slog.NewJSONHandler(io.Discard, nil))}
	if err := mk.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{ns, elsewhere} {
		if l := complianceLabel(t, "worker01", n); l != "" {
			t.Errorf("worker01 labelled %s=%q by bindings the optimizer did not write", optimizer.ComplianceLabelPrefix+n, l)
		}
	}

	// As the optimizer writes them, in its namespace: the label is set.
	bind(ns, "binding-worker01-p4", "placement-worker01-p4", "p4")
	place(ns, "placement-worker01-p4", "p4", byName("worker01"))
	if err := mk.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if l := complianceLabel(t, "worker01", ns); l != policy {
		t.Errorf("worker01's label is %q, want %s for the optimizer's own binding", l, policy)
	}
	if l := complianceLabel(t, "worker02", "someone-else"); l != "theirs" {
		t.Errorf("the marker changed another namespace's label on worker02 to %q", l)
	}
}
