package deploy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
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
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"
	workv1alpha1 "open-cluster-management.io/api/work/v1alpha1"

	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

// optNamespace is where the optimizer's RBAC tests plan: a namespace deploy/optimizer.yaml lets it
// act in (NAMESPACES, with its Role).
const optNamespace = Namespace

// optimizerNamespaces is the deployed optimizer's NAMESPACES.
func optimizerNamespaces(t *testing.T, s *manifests.Set) []string {
	t.Helper()
	svc, ok := manifests.Find(s.Services, Namespace, "optimizer")
	if !ok {
		t.Fatal("Service optimizer not found")
	}
	var out []string
	for _, n := range strings.Split(envValue(svc.Object.Spec.Template.Spec.Containers[0], "NAMESPACES"), ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// TestOptimizerRolePerNamespace: the optimizer's rights on policies, workloads, Placements and
// PlacementBindings come from a Role in each namespace its deployment lists, bound to it there;
// its ClusterRole grants nothing on them, so it has none anywhere else.
func TestOptimizerRolePerNamespace(t *testing.T) {
	s := load(t, setHub)
	nss := optimizerNamespaces(t, s)
	if !slices.Contains(nss, optNamespace) {
		t.Fatalf("NAMESPACES %v lacks %s, where these tests plan", nss, optNamespace)
	}
	cr, ok := manifests.Find(s.ClusterRoles, "", "scoreflow-optimizer")
	if !ok {
		t.Fatal("ClusterRole scoreflow-optimizer not found")
	}
	for _, r := range cr.Object.Rules {
		for _, res := range r.Resources {
			if res != "managedclusters" && res != "addonplacementscores" {
				t.Errorf("%s grants %v on %s cluster-wide; namespaced rights belong in the Role of each allowed namespace", cr.Source, r.Verbs, res)
			}
		}
	}
	for _, ns := range nss {
		if _, ok := manifests.Find(s.Roles, ns, "scoreflow-optimizer"); !ok {
			t.Errorf("no Role scoreflow-optimizer in %s, a namespace of NAMESPACES", ns)
		}
		rb, ok := manifests.Find(s.RoleBindings, ns, "scoreflow-optimizer")
		if !ok || rb.Object.RoleRef.Kind != "Role" || rb.Object.RoleRef.Name != "scoreflow-optimizer" ||
			len(rb.Object.Subjects) != 1 || rb.Object.Subjects[0].Name != "optimizer" || rb.Object.Subjects[0].Namespace != Namespace {
			t.Errorf("no RoleBinding of Role scoreflow-optimizer to scoreflow/optimizer in %s", ns)
		}
	}
	for _, it := range s.Roles {
		if it.Object.Name == "scoreflow-optimizer" && !slices.Contains(nss, it.Object.Namespace) {
			t.Errorf("Role scoreflow-optimizer in %s, which NAMESPACES does not list", it.Object.Namespace)
		}
	}
}

// TestOptimizerEndToEndUnderRBAC runs the real optimizer (pkg/optimizer) as deploy/'s optimizer
// account against a hub holding a policy, a workload and scores: it reads them, writes the plan's
// Placements and PlacementBinding, replaces them with a second plan and resets. Then the account
// is refused what the optimizer never does, and everything in namespaces it does not act in.
func TestOptimizerEndToEndUnderRBAC(t *testing.T) {
	h := rbacHub(t)
	ctx := context.Background()
	seedOptimizer(t, h)
	const ns = optNamespace
	nss := optimizerNamespaces(t, load(t, setHub))

	cfg, kube, cc := as(t, h, Namespace, "optimizer")
	o := &optimizer.Optimizer{Cluster: cc, Work: workclient.NewForConfigOrDie(cfg), Dynamic: dynamic.NewForConfigOrDie(cfg),
		Opts: optimizer.Options{Namespaces: nss, TimeLimit: 5 * time.Second, ComplianceClaim: "policy-watcher-claim", ComplianceValue: "compliant"}}
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
	mk := &optimizer.Marker{Cluster: cc, Dynamic: dynamic.NewForConfigOrDie(cfg), Namespaces: nss, Log: slog.New(slog.NewJSONHandler(io.Discard, nil))}
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
		// Nothing outside its namespaces.
		{"create a Placement in another namespace", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			_, err := cc.ClusterV1beta1().Placements("default").Create(ctx, &clusterv1beta1.Placement{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, metav1.CreateOptions{})
			return err
		}, false},
		{"delete a Placement in kube-system", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			return cc.ClusterV1beta1().Placements("kube-system").Delete(ctx, "p", metav1.DeleteOptions{})
		}, false},
		{"list Placements in every namespace", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			_, err := cc.ClusterV1beta1().Placements("").List(ctx, metav1.ListOptions{})
			return err
		}, false},
		{"list PlacementBindings in every namespace", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			_, err := dyn.Resource(optimizer.PlacementBindingResource).List(ctx, metav1.ListOptions{})
			return err
		}, false},
		{"delete a PlacementBinding in another namespace", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			return dyn.Resource(optimizer.PlacementBindingResource).Namespace("default").Delete(ctx, "b", metav1.DeleteOptions{})
		}, false},
		{"get a Policy in another namespace", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			_, err := dyn.Resource(optimizer.PolicyResource).Namespace("default").Get(ctx, "mig-2g", metav1.GetOptions{})
			return err
		}, false},
		{"get a ManifestWorkReplicaSet in another namespace", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			_, err := wc.WorkV1alpha1().ManifestWorkReplicaSets("default").Get(ctx, "mwrs-app01", metav1.GetOptions{})
			return err
		}, false},
	}, without(neverAllowed, "create a Placement", "patch a ManagedCluster")...))
}

// staleLabel gives the seeded cluster a compliance label naming no policy, so the marker's next
// sync must patch it.
func staleLabel(t *testing.T, h *localhub.Hub) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"stale"}}}`, optimizer.ComplianceLabelPrefix+optNamespace)
	if _, err := h.Cluster.ClusterV1().ManagedClusters().Patch(context.Background(), cluster, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestOptimizerNeedsEveryGrant runs the optimizer bound to copies of the deployed ClusterRole and
// Role that each lack one verb on one resource: every copy makes a plan or a reset fail with
// Forbidden, so no grant in deploy/optimizer.yaml is spare.
func TestOptimizerNeedsEveryGrant(t *testing.T) {
	h := rbacHub(t)
	ctx := context.Background()
	seedOptimizer(t, h)
	s := load(t, setHub)
	deployed, ok := manifests.Find(s.ClusterRoles, "", "scoreflow-optimizer")
	if !ok {
		t.Fatal("ClusterRole scoreflow-optimizer not found")
	}
	role, ok := manifests.Find(s.Roles, optNamespace, "scoreflow-optimizer")
	if !ok {
		t.Fatalf("Role scoreflow-optimizer not found in %s", optNamespace)
	}
	nss := optimizerNamespaces(t, s)
	params := &optimizer.Params{Namespace: optNamespace,
		Clusters:        []optimizer.Cluster{{Name: cluster, AvailablePolicies: []optimizer.Named{{Name: "mig-2g"}}}},
		TargetWorkloads: []optimizer.Named{{Name: "mwrs-app01"}},
		Preference:      optimizer.Preference{AddonPlacementScore: "opt-score"}}
	// run plans twice (the second replaces the first's objects), syncs compliance (which must
	// relabel the cluster) and resets, as account name: every call the optimizer makes.
	run := func(t *testing.T, name string, ri int) {
		cfg, _, cc := as(t, h, Namespace, name)
		o := &optimizer.Optimizer{Cluster: cc, Work: workclient.NewForConfigOrDie(cfg), Dynamic: dynamic.NewForConfigOrDie(cfg),
			Opts: optimizer.Options{Namespaces: nss, TimeLimit: 5 * time.Second}}
		var ferr *optimizer.Error
		for _, id := range []string{"a" + fmt.Sprint(ri), "b" + fmt.Sprint(ri)} {
			if _, ferr = o.Optimize(ctx, params, id); ferr != nil {
				break
			}
		}
		var syncErr error
		if ferr == nil {
			staleLabel(t, h)
			mk := &optimizer.Marker{Cluster: cc, Dynamic: dynamic.NewForConfigOrDie(cfg), Namespaces: nss, Log: slog.New(slog.NewJSONHandler(io.Discard, nil))}
			syncErr = mk.Sync(ctx)
		}
		if ferr == nil && syncErr == nil {
			_, ferr = o.Reset(ctx, &optimizer.ResetRequest{Namespace: optNamespace})
		}
		// The API server's Forbidden (500), not the optimizer's own refusal of a namespace (400).
		if forbidden := (ferr != nil && ferr.Reason == contract.ReasonForbidden && ferr.Status == 500) || apierrors.IsForbidden(syncErr); !forbidden {
			t.Errorf("%v / sync %v, want Forbidden", ferr, syncErr)
		}
		// Leave nothing for the next variant to trip over.
		admin := &optimizer.Optimizer{Cluster: h.Cluster, Work: workclient.NewForConfigOrDie(h.Config), Dynamic: dynamic.NewForConfigOrDie(h.Config),
			Opts: optimizer.Options{Namespaces: nss}}
		if _, ferr := admin.Reset(ctx, &optimizer.ResetRequest{Namespace: optNamespace}); ferr != nil {
			t.Fatal(ferr)
		}
	}
	n := 0
	for ri, rule := range deployed.Object.Rules {
		for _, res := range rule.Resources {
			for _, verb := range rule.Verbs {
				n++
				name := fmt.Sprintf("test-optimizer-without-%s-%s", verb, res)
				t.Run(name, func(t *testing.T) {
					bindToNewAccount(ctx, t, h, withoutGrant(deployed.Object, name, ri, res, verb))
					bindRole(ctx, t, h, name, role.Object.Name) // the deployed Role, whole
					run(t, name, ri)
				})
			}
		}
	}
	for ri, rule := range role.Object.Rules {
		for _, res := range rule.Resources {
			for _, verb := range rule.Verbs {
				n++
				name := fmt.Sprintf("test-optimizer-ns-without-%s-%s", verb, res)
				t.Run(name, func(t *testing.T) {
					cr := deployed.Object.DeepCopy()
					cr.Name = name
					bindToNewAccount(ctx, t, h, cr) // the deployed ClusterRole, whole
					reduced := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: optNamespace},
						Rules: withoutGrant(&rbacv1.ClusterRole{Rules: role.Object.Rules}, name, ri, res, verb).Rules}
					if err := createIgnoreExists(h.Kube.RbacV1().Roles(optNamespace).Create(ctx, reduced, metav1.CreateOptions{})); err != nil {
						t.Fatal(err)
					}
					bindRole(ctx, t, h, name, name)
					run(t, name, 100+ri)
				})
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d grants checked", n)
	}
}

// bindRole binds Role role of optNamespace to ServiceAccount account of Namespace there.
func bindRole(ctx context.Context, t *testing.T, h *localhub.Hub, account, role string) {
	t.Helper()
	err := createIgnoreExists(h.Kube.RbacV1().RoleBindings(optNamespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: account, Namespace: optNamespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account, Namespace: Namespace}},
	}, metav1.CreateOptions{}))
	if err != nil {
		t.Fatal(err)
	}
}

var seedOnce sync.Once

// seedOptimizer creates, once, what the optimizer's RBAC tests plan: in namespace optNamespace a
// policy and a workload, and scores on the managed cluster.
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
	const ns = optNamespace
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
