package deploy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	workclient "open-cluster-management.io/api/client/work/clientset/versioned"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"
	workv1alpha1 "open-cluster-management.io/api/work/v1alpha1"

	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

// TestOptimizerEndToEndUnderRBAC runs the real optimizer (pkg/optimizer) as deploy/'s optimizer
// account against a hub holding a policy, a workload and scores: it reads them, writes the plan's
// Placements and PlacementBinding, replaces them with a second plan and resets. Then the account
// is refused what the optimizer never does.
func TestOptimizerEndToEndUnderRBAC(t *testing.T) {
	h := rbacHub(t)
	ctx := context.Background()
	seedOptimizer(t, h)
	const ns = "opt-rbac"

	cfg, kube, cc := as(t, h, Namespace, "optimizer")
	o := &optimizer.Optimizer{Cluster: cc, Work: workclient.NewForConfigOrDie(cfg), Dynamic: dynamic.NewForConfigOrDie(cfg),
		Opts: optimizer.Options{TimeLimit: 5 * time.Second, ComplianceClaim: "policy-watcher-claim", ComplianceValue: "compliant"}}
	params := &optimizer.Params{Namespace: ns,
		Clusters:        []optimizer.Cluster{{Name: cluster, AvailablePolicies: []optimizer.Named{{Name: "mig-2g"}}}},
		TargetWorkloads: []optimizer.Named{{Name: "mwrs-app01"}},
		Preference:      optimizer.Preference{AddonPlacementScore: "opt-score"}}
	for i, id := range []string{"plan0001", "plan0002"} {
		plan, ferr := o.Optimize(ctx, params, id)
		if ferr != nil {
			t.Fatalf("plan %d as the optimizer account: %v", i+1, ferr)
		}
		if plan.Objective != 42 || len(plan.Placements) != 2 || len(plan.PlacementBindings) != 1 {
			t.Errorf("plan %d: %+v", i+1, plan)
		}
		if i == 1 && len(plan.Removed) != 2 {
			t.Errorf("the second plan removed %v, want the first's policy Placement and binding", plan.Removed)
		}
	}
	// The compliance marker, as the optimizer account: the seeded root policy reports mig-2g
	// Compliant on the cluster, so a stale label is replaced by the policy's name.
	staleLabel(t, h)
	mk := &optimizer.Marker{Cluster: cc, Dynamic: dynamic.NewForConfigOrDie(cfg), Log: slog.New(slog.NewJSONHandler(io.Discard, nil))}
	if err := mk.Sync(ctx); err != nil {
		t.Fatalf("compliance sync as the optimizer account: %v", err)
	}
	if mc, err := h.Cluster.ClusterV1().ManagedClusters().Get(ctx, cluster, metav1.GetOptions{}); err != nil || mc.Labels[optimizer.ComplianceLabelPrefix+ns] != "mig-2g" {
		t.Errorf("after the sync the cluster's labels are %v (%v), want %s=mig-2g", mc.Labels, err, optimizer.ComplianceLabelPrefix+ns)
	}
	res, ferr := o.Reset(ctx, &optimizer.ResetRequest{Namespace: ns})
	if ferr != nil {
		t.Fatalf("reset as the optimizer account: %v", ferr)
	}
	if len(res.Removed) != 3 {
		t.Errorf("reset removed %v, want 2 Placements and 1 binding", res.Removed)
	}

	dyn := dynamic.NewForConfigOrDie(cfg)
	wc := workclient.NewForConfigOrDie(cfg)
	checkAccess(t, kube, cc, append([]access{
		{"update a Policy", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			_, err := dyn.Resource(optimizer.PolicyResource).Namespace(ns).Patch(ctx, "mig-2g", types.MergePatchType, []byte(`{"spec":{"disabled":true}}`), metav1.PatchOptions{})
			return err
		}, false},
		{"list Policies", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			_, err := dyn.Resource(optimizer.PolicyResource).Namespace(ns).List(ctx, metav1.ListOptions{})
			return err
		}, false},
		{"delete a ManifestWorkReplicaSet", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			return wc.WorkV1alpha1().ManifestWorkReplicaSets(ns).Delete(ctx, "mwrs-app01", metav1.DeleteOptions{})
		}, false},
		{"list ManifestWorks", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			_, err := dyn.Resource(schema.GroupVersionResource{Group: "work.open-cluster-management.io", Version: "v1", Resource: "manifestworks"}).Namespace(cluster).List(ctx, metav1.ListOptions{})
			return err
		}, false},
		{"write an AddOnPlacementScore's status", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			_, err := cc.ClusterV1alpha1().AddOnPlacementScores(cluster).Patch(ctx, "opt-score", types.MergePatchType, []byte(`{"status":{"scores":[]}}`), metav1.PatchOptions{}, "status")
			return err
		}, false},
		{"update a Placement's status", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			_, err := cc.ClusterV1beta1().Placements(ns).Patch(ctx, "x", types.MergePatchType, []byte(`{"status":{}}`), metav1.PatchOptions{}, "status")
			return err
		}, false},
		{"write PlacementDecisions", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			return cc.ClusterV1beta1().PlacementDecisions(ns).Delete(ctx, "x", metav1.DeleteOptions{})
		}, false},
	}, without(neverAllowed, "create a Placement", "patch a ManagedCluster")...))
}

// staleLabel gives the seeded cluster a compliance label naming no policy, so the marker's next
// sync must patch it.
func staleLabel(t *testing.T, h *localhub.Hub) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"stale"}}}`, optimizer.ComplianceLabelPrefix+"opt-rbac")
	if _, err := h.Cluster.ClusterV1().ManagedClusters().Patch(context.Background(), cluster, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestOptimizerNeedsEveryGrant runs the optimizer bound to copies of the deployed ClusterRole that
// each lack one verb on one resource: every copy makes a plan or a reset fail with Forbidden, so
// no grant in deploy/optimizer.yaml is spare.
func TestOptimizerNeedsEveryGrant(t *testing.T) {
	h := rbacHub(t)
	ctx := context.Background()
	seedOptimizer(t, h)
	deployed, ok := manifests.Find(load(t, setHub).ClusterRoles, "", "scoreflow-optimizer")
	if !ok {
		t.Fatal("ClusterRole scoreflow-optimizer not found")
	}
	params := &optimizer.Params{Namespace: "opt-rbac",
		Clusters:        []optimizer.Cluster{{Name: cluster, AvailablePolicies: []optimizer.Named{{Name: "mig-2g"}}}},
		TargetWorkloads: []optimizer.Named{{Name: "mwrs-app01"}},
		Preference:      optimizer.Preference{AddonPlacementScore: "opt-score"}}
	n := 0
	for ri, rule := range deployed.Object.Rules {
		for _, res := range rule.Resources {
			for _, verb := range rule.Verbs {
				n++
				name := fmt.Sprintf("test-optimizer-without-%s-%s", verb, res)
				t.Run(name, func(t *testing.T) {
					role := withoutGrant(deployed.Object, name, ri, res, verb)
					bindToNewAccount(ctx, t, h, role)
					cfg, _, cc := as(t, h, Namespace, name)
					o := &optimizer.Optimizer{Cluster: cc, Work: workclient.NewForConfigOrDie(cfg), Dynamic: dynamic.NewForConfigOrDie(cfg),
						Opts: optimizer.Options{TimeLimit: 5 * time.Second}}
					// Two plans (the second replaces the first's objects) and a reset: every call the
					// optimizer makes.
					var ferr *optimizer.Error
					for _, id := range []string{"a" + fmt.Sprint(ri), "b" + fmt.Sprint(ri)} {
						if _, ferr = o.Optimize(ctx, params, id); ferr != nil {
							break
						}
					}
					// Then a compliance sync (which must relabel the cluster), then a reset.
					var syncErr error
					if ferr == nil {
						staleLabel(t, h)
						mk := &optimizer.Marker{Cluster: cc, Dynamic: dynamic.NewForConfigOrDie(cfg), Log: slog.New(slog.NewJSONHandler(io.Discard, nil))}
						syncErr = mk.Sync(ctx)
					}
					if ferr == nil && syncErr == nil {
						_, ferr = o.Reset(ctx, &optimizer.ResetRequest{Namespace: "opt-rbac"})
					}
					forbidden := (ferr != nil && ferr.Reason == contract.ReasonForbidden) || apierrors.IsForbidden(syncErr)
					if !forbidden {
						t.Errorf("without %s on %s: %v / sync %v, want Forbidden", verb, res, ferr, syncErr)
					}
					// Leave nothing for the next variant to trip over.
					admin := &optimizer.Optimizer{Cluster: h.Cluster, Work: workclient.NewForConfigOrDie(h.Config), Dynamic: dynamic.NewForConfigOrDie(h.Config)}
					if _, ferr := admin.Reset(ctx, &optimizer.ResetRequest{Namespace: "opt-rbac"}); ferr != nil {
						t.Fatal(ferr)
					}
				})
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d grants checked", n)
	}
}

var seedOnce sync.Once

// seedOptimizer creates, once, what the optimizer's RBAC tests plan: in namespace opt-rbac a policy
// and a workload, and scores on the managed cluster.
func seedOptimizer(t *testing.T, h *localhub.Hub) {
	t.Helper()
	var err error
	seedOnce.Do(func() { err = seed(h) })
	if err != nil {
		t.Fatal(err)
	}
}

func seed(h *localhub.Hub) error {
	ctx := context.Background()
	if err := h.InstallWorkloadCRDs(); err != nil {
		return err
	}
	const ns = "opt-rbac"
	if _, err := h.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	admin := dynamic.NewForConfigOrDie(h.Config)
	pol := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policy.open-cluster-management.io/v1", "kind": "Policy",
		"metadata": map[string]any{"name": "mig-2g", "namespace": ns, "labels": map[string]any{
			optimizer.LabelSupplyKind: "gpu", optimizer.LabelSupplyAmount: "3", optimizer.LabelSupplyDevice: "2g"}},
		"spec": map[string]any{"disabled": false, "policy-templates": []any{}},
	}}
	created, err := admin.Resource(optimizer.PolicyResource).Namespace(ns).Create(ctx, pol, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err == nil {
		// What the governance propagator rolls up once the cluster's replica complies.
		_ = unstructured.SetNestedSlice(created.Object, []any{map[string]any{"clustername": cluster, "clusternamespace": cluster, "compliant": "Compliant"}}, "status", "status")
		if _, err := admin.Resource(optimizer.PolicyResource).Namespace(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	if _, err := workclient.NewForConfigOrDie(h.Config).WorkV1alpha1().ManifestWorkReplicaSets(ns).Create(ctx, &workv1alpha1.ManifestWorkReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "mwrs-app01", Namespace: ns, Labels: map[string]string{
			optimizer.LabelApp: "app01", optimizer.LabelRequestKind: "gpu", optimizer.LabelRequestAmount: "2"}},
		Spec: workv1alpha1.ManifestWorkReplicaSetSpec{PlacementRefs: []workv1alpha1.LocalPlacementReference{{Name: "app01-placement"}}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	aps, err := h.Cluster.ClusterV1alpha1().AddOnPlacementScores(cluster).Create(ctx, &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: "opt-score", Namespace: cluster}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	aps.Status.Scores = []clusterv1alpha1.AddOnPlacementScoreItem{{Name: "app01;2g", Value: 42}}
	if _, err := h.Cluster.ClusterV1alpha1().AddOnPlacementScores(cluster).UpdateStatus(ctx, aps, metav1.UpdateOptions{}); err != nil {
		return err
	}

	return nil
}

// without returns table minus the entries named.
func without(table []access, names ...string) []access {
	var out []access
	for _, a := range table {
		keep := true
		for _, n := range names {
			keep = keep && a.name != n
		}
		if keep {
			out = append(out, a)
		}
	}
	return out
}
