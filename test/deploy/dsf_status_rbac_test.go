package deploy

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/pkg/dsf"
	"github.com/scoreflow/scoreflow/pkg/leader"
)

const (
	dsfStatusSA = "dsf-status"
	dsfStatusNS = "open-cluster-management"
)

// TestDSFStatusRBAC: the status writer's account (addon/dsf) is bound to exactly two Roles: in the
// DynamicScorers' namespace list on dynamicscorers and update on dynamicscorers/status; in its
// own, its Lease. With them the real status writer, under leader election, writes a scorer's
// status; without any one of those grants it does not; and the account can do nothing else: no
// get or watch, no spec update, no patch, no delete, no Secret, no other namespace.
func TestDSFStatusRBAC(t *testing.T) {
	items, err := manifests.Build(filepath.Join(repo, "addon", "dsf"))
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	roles := map[string]*rbacv1.Role{}
	var bound []string
	for _, it := range items {
		o := it.Object
		switch o.GetKind() {
		case "Role":
			var r rbacv1.Role
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
				t.Fatal(err)
			}
			roles[r.Namespace+"/"+r.Name] = &r
		case "RoleBinding", "ClusterRoleBinding":
			var b rbacv1.RoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
				t.Fatal(err)
			}
			for _, s := range b.Subjects {
				if s.Kind == rbacv1.ServiceAccountKind && s.Namespace == Namespace && s.Name == dsfStatusSA {
					bound = append(bound, o.GetKind()+" "+b.Namespace+"/"+b.Name+" -> "+b.RoleRef.Kind+"/"+b.RoleRef.Name)
				}
			}
		}
		objs = append(objs, o)
	}
	slices.Sort(bound)
	if want := []string{"RoleBinding open-cluster-management/dsf-status -> Role/dsf-status", "RoleBinding scoreflow/dsf-status-lease -> Role/dsf-status-lease"}; !reflect.DeepEqual(bound, want) {
		t.Fatalf("%s is bound by %v, want %v", dsfStatusSA, bound, want)
	}
	scorerRole, leaseRole := roles[dsfStatusNS+"/dsf-status"], roles[Namespace+"/dsf-status-lease"]
	group := []string{dsf.Group}
	if want := []rbacv1.PolicyRule{
		{APIGroups: group, Resources: []string{"dynamicscorers"}, Verbs: []string{"list"}},
		{APIGroups: group, Resources: []string{"dynamicscorers/status"}, Verbs: []string{"update"}},
	}; scorerRole == nil || !reflect.DeepEqual(scorerRole.Rules, want) {
		t.Fatalf("Role dsf-status: %+v, want exactly %+v", scorerRole, want)
	}
	if want := []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"dsf-status"}, Verbs: []string{"get", "update"}},
	}; leaseRole == nil || !reflect.DeepEqual(leaseRole.Rules, want) {
		t.Fatalf("Role dsf-status-lease: %+v, want exactly %+v", leaseRole, want)
	}

	ctx := t.Context()
	h, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Stop() })
	if _, err := envtest.InstallCRDs(h.Config, envtest.CRDInstallOptions{Paths: []string{filepath.Join(repo, "addon", "dsf", "crds")}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{Namespace, dsfStatusNS, "elsewhere"} {
		if _, err := h.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dyn := dynamic.NewForConfigOrDie(h.Config)
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "Role", "RoleBinding":
			if o.GetName() != dsfStatusSA && o.GetName() != "dsf-status-lease" {
				continue
			}
			gvr := map[string]string{"ServiceAccount": "serviceaccounts", "Role": "roles", "RoleBinding": "rolebindings"}[o.GetKind()]
			gv := o.GroupVersionKind().GroupVersion()
			if _, err := dyn.Resource(gv.WithResource(gvr)).Namespace(o.GetNamespace()).Create(ctx, o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	healthz := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer healthz.Close()
	for _, ns := range []string{dsfStatusNS, "elsewhere"} {
		if _, err := dyn.Resource(dsf.ScorersResource).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": dsf.Group + "/" + dsf.Version, "kind": dsf.KindScorer, "metadata": map[string]any{"name": "s"},
			"spec": map[string]any{"description": "d", "configURL": healthz.URL + "/config", "configSyncMode": "None"},
		}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	as := func(sa string) *rest.Config {
		cfg := rest.CopyConfig(h.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: serviceAccountUser(Namespace, sa)}
		return cfg
	}
	t.Run("as deployed", func(t *testing.T) {
		if ok, why := statusWriterWorks(t, h, as(dsfStatusSA)); !ok {
			t.Error(why)
		}
	})
	for _, role := range []*rbacv1.Role{scorerRole, leaseRole} {
		for ri, rule := range role.Rules {
			for _, res := range rule.Resources {
				for _, verb := range rule.Verbs {
					name := strings.ReplaceAll(fmt.Sprintf("test-dsf-status-without-%s-%s", verb, res), "/", "-")
					t.Run(name, func(t *testing.T) {
						bindStatusVariant(ctx, t, h, name, role, ri, res, verb, scorerRole, leaseRole)
						if ok, _ := statusWriterWorks(t, h, as(name)); ok {
							t.Errorf("without %s on %s the status writer still works: the grant is not needed", verb, res)
						}
					})
				}
			}
		}
	}

	sa := kubernetes.NewForConfigOrDie(as(dsfStatusSA))
	saDyn := dynamic.NewForConfigOrDie(as(dsfStatusSA))
	scorers := saDyn.Resource(dsf.ScorersResource)
	obj := func() *unstructured.Unstructured {
		u, err := dyn.Resource(dsf.ScorersResource).Namespace(dsfStatusNS).Get(ctx, "s", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	for name, do := range map[string]func() error{
		"update a DynamicScorer's spec": func() error {
			_, err := scorers.Namespace(dsfStatusNS).Update(ctx, obj(), metav1.UpdateOptions{})
			return err
		},
		"patch a DynamicScorer's status": func() error {
			_, err := scorers.Namespace(dsfStatusNS).Patch(ctx, "s", "application/merge-patch+json", []byte(`{"status":{"healthStatus":"Active"}}`), metav1.PatchOptions{}, "status")
			return err
		},
		"delete a DynamicScorer": func() error { return scorers.Namespace(dsfStatusNS).Delete(ctx, "s", metav1.DeleteOptions{}) },
		"create a DynamicScorer": func() error {
			_, err := scorers.Namespace(dsfStatusNS).Create(ctx, obj(), metav1.CreateOptions{})
			return err
		},
		"get a DynamicScorer": func() error { _, err := scorers.Namespace(dsfStatusNS).Get(ctx, "s", metav1.GetOptions{}); return err },
		"watch DynamicScorers": func() error {
			w, err := scorers.Namespace(dsfStatusNS).Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		},
		"list DynamicScorers elsewhere": func() error {
			_, err := scorers.Namespace("elsewhere").List(ctx, metav1.ListOptions{})
			return err
		},
		"update a status elsewhere": func() error {
			u := obj()
			u.SetNamespace("elsewhere")
			_, err := scorers.Namespace("elsewhere").UpdateStatus(ctx, u, metav1.UpdateOptions{})
			return err
		},
		"list DynamicScoringConfigs": func() error {
			_, err := saDyn.Resource(dsf.ConfigsResource).Namespace(dsfStatusNS).List(ctx, metav1.ListOptions{})
			return err
		},
		"get a Secret": func() error {
			_, err := sa.CoreV1().Secrets(dsfStatusNS).Get(ctx, "any", metav1.GetOptions{})
			return err
		},
		"get another Lease": func() error {
			_, err := sa.CoordinationV1().Leases(Namespace).Get(ctx, "score-writer", metav1.GetOptions{})
			return err
		},
	} {
		if err := do(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", name, err)
		}
	}
}

// statusWriterWorks runs the real status writer as cfg's identity, under its Lease (deleted first,
// as on a first start), and reports whether it writes the scorer's status within 5 seconds (after
// clearing it).
func statusWriterWorks(t *testing.T, h *localhub.Hub, cfg *rest.Config) (bool, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := h.Kube.CoordinationV1().Leases(Namespace).Delete(ctx, "dsf-status", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(h.Config)
	clear := func() {
		u, err := dyn.Resource(dsf.ScorersResource).Namespace(dsfStatusNS).Get(ctx, "s", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u.Object["status"] = map[string]any{"healthStatus": "Unknown"}
		if _, err := dyn.Resource(dsf.ScorersResource).Namespace(dsfStatusNS).UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	written := func(within time.Duration) bool {
		for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			u, err := dyn.Resource(dsf.ScorersResource).Namespace(dsfStatusNS).Get(ctx, "s", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if hs, _, _ := unstructured.NestedString(u.Object, "status", "healthStatus"); hs == dsf.HealthActive {
				return true
			}
		}
		return false
	}
	clear()
	w, err := dsf.NewStatusWriter(dynamic.NewForConfigOrDie(cfg), dsfStatusNS, dsf.StatusOptions{Timeout: time.Second, Interval: 500 * time.Millisecond}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	const renewDeadline = 2 * time.Second
	el, err := leader.New(kubernetes.NewForConfigOrDie(cfg), leader.Options{Namespace: Namespace, Name: "dsf-status",
		LeaseDuration: 3 * time.Second, RenewDeadline: renewDeadline, RetryPeriod: 200 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		leader.RunOrAlways(ctx, el, func(ctx context.Context) { _ = w.Run(ctx) })
	}()
	defer func() { cancel(); <-done }()
	if !written(5 * time.Second) {
		return false, "the scorer's status was not written within 5s"
	}
	// Still writing once the Lease had to be renewed.
	time.Sleep(time.Until(began.Add(renewDeadline + time.Second)))
	clear()
	if !written(2 * time.Second) {
		return false, "the scorer's status was written, but not again after the Lease's renew deadline"
	}
	return true, ""
}

// bindStatusVariant binds a new account to copies of the two Roles, role without verb on res.
func bindStatusVariant(ctx context.Context, t *testing.T, h *localhub.Hub, name string, role *rbacv1.Role, ri int, res, verb string, all ...*rbacv1.Role) {
	t.Helper()
	if err := createIgnoreExists(h.Kube.CoreV1().ServiceAccounts(Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})); err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		c := r.DeepCopy()
		c.Name, c.ResourceVersion, c.UID = name, "", ""
		if r == role {
			rule := c.Rules[ri]
			c.Rules[ri].Resources = slices.DeleteFunc(slices.Clone(rule.Resources), func(x string) bool { return x == res })
			if rest := slices.DeleteFunc(slices.Clone(rule.Verbs), func(v string) bool { return v == verb }); len(rest) > 0 {
				c.Rules = append(c.Rules, rbacv1.PolicyRule{APIGroups: rule.APIGroups, Resources: []string{res}, ResourceNames: rule.ResourceNames, Verbs: rest})
			}
			c.Rules = slices.DeleteFunc(c.Rules, func(r rbacv1.PolicyRule) bool { return len(r.Resources) == 0 })
		}
		if err := createIgnoreExists(h.Kube.RbacV1().Roles(c.Namespace).Create(ctx, c, metav1.CreateOptions{})); err != nil {
			t.Fatal(err)
		}
		if err := createIgnoreExists(h.Kube.RbacV1().RoleBindings(c.Namespace).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: Namespace}},
		}, metav1.CreateOptions{})); err != nil {
			t.Fatal(err)
		}
	}
}
