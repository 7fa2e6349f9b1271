package deploy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"

	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer/health"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

// The hub is started by the first test that needs it and stopped after all tests.
var (
	hubOnce sync.Once
	hub     *localhub.Hub
	hubErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if hub != nil {
		_ = hub.Stop()
	}
	os.Exit(code)
}

const cluster = "cluster1"

// rbacHub returns a local hub (real etcd and kube-apiserver with RBAC on, the OCM CRDs) holding
// deploy/'s namespace, ServiceAccounts and RBAC objects, exactly as written, and one managed
// cluster with an AddOnPlacementScore made by the admin.
func rbacHub(t *testing.T) *localhub.Hub {
	t.Helper()
	s := load(t, setHub)
	hubOnce.Do(func() {
		hub, hubErr = localhub.Start()
		if hubErr != nil {
			return
		}
		hubErr = applyRBAC(context.Background(), hub.Kube, s)
		if hubErr == nil {
			hubErr = hub.AddCluster(context.Background(), cluster, nil)
		}
		if hubErr == nil {
			hubErr = hub.AcceptCluster(context.Background(), cluster)
		}
		if hubErr == nil {
			_, hubErr = hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(cluster).Create(context.Background(),
				&clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: "existing", Namespace: cluster}}, metav1.CreateOptions{})
		}
	})
	if hubErr != nil {
		t.Fatalf("local hub: %v", hubErr)
	}
	return hub
}

// applyRBAC creates the access-control objects of a set as an administrator would apply them.
func applyRBAC(ctx context.Context, kube kubernetes.Interface, s *manifests.Set) error {
	create := func(err error) error {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	for _, it := range s.Namespaces {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, it.Object.DeepCopy(), metav1.CreateOptions{}); create(err) != nil {
			return fmt.Errorf("%s: %w", it.Source, err)
		}
	}
	for _, it := range s.ServiceAccounts {
		if _, err := kube.CoreV1().ServiceAccounts(it.Object.Namespace).Create(ctx, it.Object.DeepCopy(), metav1.CreateOptions{}); create(err) != nil {
			return fmt.Errorf("%s: %w", it.Source, err)
		}
	}
	for _, it := range s.ClusterRoles {
		if _, err := kube.RbacV1().ClusterRoles().Create(ctx, it.Object.DeepCopy(), metav1.CreateOptions{}); create(err) != nil {
			return fmt.Errorf("%s: %w", it.Source, err)
		}
	}
	for _, it := range s.ClusterRoleBindings {
		if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, it.Object.DeepCopy(), metav1.CreateOptions{}); create(err) != nil {
			return fmt.Errorf("%s: %w", it.Source, err)
		}
	}
	for _, it := range s.Roles {
		if _, err := kube.RbacV1().Roles(it.Object.Namespace).Create(ctx, it.Object.DeepCopy(), metav1.CreateOptions{}); create(err) != nil {
			return fmt.Errorf("%s: %w", it.Source, err)
		}
	}
	for _, it := range s.RoleBindings {
		if _, err := kube.RbacV1().RoleBindings(it.Object.Namespace).Create(ctx, it.Object.DeepCopy(), metav1.CreateOptions{}); create(err) != nil {
			return fmt.Errorf("%s: %w", it.Source, err)
		}
	}
	return nil
}

func serviceAccountUser(ns, name string) string { return "system:serviceaccount:" + ns + ":" + name }

// as returns clients that act as a ServiceAccount. The API server adds the account's groups
// (system:serviceaccounts, system:serviceaccounts:<ns>, system:authenticated) to an impersonated
// service-account user, so RBAC sees exactly what it sees for the pod's token.
func as(t *testing.T, h *localhub.Hub, ns, sa string) (*rest.Config, kubernetes.Interface, clusterclient.Interface) {
	t.Helper()
	cfg := rest.CopyConfig(h.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: serviceAccountUser(ns, sa)}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := clusterclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, kube, cc
}

// access is one API request and whether RBAC must allow it.
type access struct {
	name    string
	do      func(ctx context.Context, kube kubernetes.Interface, cc clusterclient.Interface) error
	allowed bool
}

func checkAccess(t *testing.T, kube kubernetes.Interface, cc clusterclient.Interface, table []access) {
	t.Helper()
	for _, a := range table {
		t.Run(a.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := a.do(ctx, kube, cc)
			switch {
			case a.allowed && err != nil:
				t.Errorf("want allowed, got %v", err)
			case !a.allowed && !apierrors.IsForbidden(err):
				// Forbidden exactly: authorisation is checked before existence, so a NotFound or
				// any other error would mean the request got past RBAC.
				t.Errorf("want Forbidden, got %v", err)
			}
		})
	}
}

// Requests no scoreflow account may make.
var neverAllowed = []access{
	{"delete an AddOnPlacementScore", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
		return cc.ClusterV1alpha1().AddOnPlacementScores(cluster).Delete(ctx, "existing", metav1.DeleteOptions{})
	}, false},
	{"update an AddOnPlacementScore (not its status)", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
		obj := &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: "existing", Namespace: cluster, Labels: map[string]string{"x": "y"}}}
		_, err := cc.ClusterV1alpha1().AddOnPlacementScores(cluster).Update(ctx, obj, metav1.UpdateOptions{})
		return err
	}, false},
	{"list AddOnPlacementScores", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
		_, err := cc.ClusterV1alpha1().AddOnPlacementScores(cluster).List(ctx, metav1.ListOptions{})
		return err
	}, false},
	{"create a ManagedCluster", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
		_, err := cc.ClusterV1().ManagedClusters().Create(ctx, &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: "rogue"}}, metav1.CreateOptions{})
		return err
	}, false},
	{"update a ManagedCluster", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
		mc := &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster}, Spec: clusterv1.ManagedClusterSpec{HubAcceptsClient: false}}
		_, err := cc.ClusterV1().ManagedClusters().Update(ctx, mc, metav1.UpdateOptions{})
		return err
	}, false},
	{"patch a ManagedCluster", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
		_, err := cc.ClusterV1().ManagedClusters().Patch(ctx, cluster, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
		return err
	}, false},
	{"delete a ManagedCluster", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
		return cc.ClusterV1().ManagedClusters().Delete(ctx, cluster, metav1.DeleteOptions{})
	}, false},
	{"create a Placement", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
		_, err := cc.ClusterV1beta1().Placements(Namespace).Create(ctx, &clusterv1beta1.Placement{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, metav1.CreateOptions{})
		return err
	}, false},
	{"create a namespace", func(ctx context.Context, kube kubernetes.Interface, _ clusterclient.Interface) error {
		_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cluster9"}}, metav1.CreateOptions{})
		return err
	}, false},
	{"read a Secret in a cluster namespace", func(ctx context.Context, kube kubernetes.Interface, _ clusterclient.Interface) error {
		_, err := kube.CoreV1().Secrets(cluster).Get(ctx, "any", metav1.GetOptions{})
		return err
	}, false},
	{"list Secrets in scoreflow", func(ctx context.Context, kube kubernetes.Interface, _ clusterclient.Interface) error {
		_, err := kube.CoreV1().Secrets(Namespace).List(ctx, metav1.ListOptions{})
		return err
	}, false},
	{"edit its own ClusterRole", func(ctx context.Context, kube kubernetes.Interface, _ clusterclient.Interface) error {
		_, err := kube.RbacV1().ClusterRoles().Patch(ctx, "scoreflow-score-writer", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
		return err
	}, false},
}

var (
	listManagedClusters = access{"list ManagedClusters", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
		_, err := cc.ClusterV1().ManagedClusters().List(ctx, metav1.ListOptions{})
		return err
	}, true}
	watchManagedClusters = access{"watch ManagedClusters", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
		w, err := cc.ClusterV1().ManagedClusters().Watch(ctx, metav1.ListOptions{})
		if err == nil {
			w.Stop()
		}
		return err
	}, true}
	getManagedCluster = access{"get a ManagedCluster", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
		_, err := cc.ClusterV1().ManagedClusters().Get(ctx, cluster, metav1.GetOptions{})
		return err
	}, true}
	getScore = access{"get an AddOnPlacementScore", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
		_, err := cc.ClusterV1alpha1().AddOnPlacementScores(cluster).Get(ctx, "existing", metav1.GetOptions{})
		return err
	}, true}
)

// createScore creates an AddOnPlacementScore of this name in the test cluster's namespace.
func createScore(name string) access {
	return access{"create an AddOnPlacementScore", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
		_, err := cc.ClusterV1alpha1().AddOnPlacementScores(cluster).Create(ctx,
			&clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cluster}}, metav1.CreateOptions{})
		return err
	}, true}
}

func with(allowed bool, a access) access { a.allowed = allowed; return a }

// deleteAfter deletes the object name with del once the test is over: the package's tests share
// one hub, and -count runs them again. Gone already is fine.
func deleteAfter(t *testing.T, del func(context.Context, string, metav1.DeleteOptions) error, name string) {
	t.Cleanup(func() {
		if err := del(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("removing %s: %v", name, err)
		}
	})
}

// TestScoreWriterRBAC: deploy/'s RBAC lets the writer's account do what pkg/scorewriter does, and
// nothing else.
func TestScoreWriterRBAC(t *testing.T) {
	h := rbacHub(t)
	_, kube, cc := as(t, h, Namespace, "score-writer")
	deleteAfter(t, h.Cluster.ClusterV1alpha1().AddOnPlacementScores(cluster).Delete, "rbac-create")
	if _, err := h.Cluster.ClusterV1alpha1().AddOnPlacementScores(cluster).Create(context.Background(),
		&clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: "rbac-delete", Namespace: cluster}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	deleteAfter(t, h.Cluster.ClusterV1alpha1().AddOnPlacementScores(cluster).Delete, "rbac-delete")
	table := []access{
		listManagedClusters, watchManagedClusters, getManagedCluster,
		createScore("rbac-create"),
		getScore,
		// An object the writer left without scores goes once its grace period has passed.
		{"delete an AddOnPlacementScore", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			return cc.ClusterV1alpha1().AddOnPlacementScores(cluster).Delete(ctx, "rbac-delete", metav1.DeleteOptions{})
		}, true},
		// An informer over every namespace's AddOnPlacementScores: the writer knows each
		// object's expiry after a restart and whatever another replica wrote.
		with(true, named(neverAllowed, "list AddOnPlacementScores")),
		{"list AddOnPlacementScores of every namespace", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			_, err := cc.ClusterV1alpha1().AddOnPlacementScores(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
			return err
		}, true},
		{"watch AddOnPlacementScores of every namespace", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			w, err := cc.ClusterV1alpha1().AddOnPlacementScores(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}, true},
		// The writer keeps its order ledger in a status condition: patching the object itself
		// (its annotations, say) is not granted.
		{"patch an AddOnPlacementScore's annotations", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			_, err := cc.ClusterV1alpha1().AddOnPlacementScores(cluster).Patch(ctx, "existing", types.MergePatchType,
				[]byte(`{"metadata":{"annotations":{"scoreflow.io/scores":"{}"}}}`), metav1.PatchOptions{})
			return err
		}, false},
		{"update an AddOnPlacementScore's status", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			obj, err := cc.ClusterV1alpha1().AddOnPlacementScores(cluster).Get(ctx, "existing", metav1.GetOptions{})
			if err != nil {
				return err
			}
			obj.Status.Scores = []clusterv1alpha1.AddOnPlacementScoreItem{{Name: "rbac", Value: 7}}
			_, err = cc.ClusterV1alpha1().AddOnPlacementScores(cluster).UpdateStatus(ctx, obj, metav1.UpdateOptions{})
			return err
		}, true},
		// The writer writes status only with UpdateStatus, guarded by resourceVersion: a merge
		// patch would bypass that guard (and the order ledger with it), so it is not granted.
		{"patch an AddOnPlacementScore's status", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			_, err := cc.ClusterV1alpha1().AddOnPlacementScores(cluster).Patch(ctx, "existing", types.MergePatchType,
				[]byte(`{"status":{"scores":[{"name":"rbac","value":8}]}}`), metav1.PatchOptions{}, "status")
			return err
		}, false},
	}
	checkAccess(t, kube, cc, append(table, without(neverAllowed, "list AddOnPlacementScores", "delete an AddOnPlacementScore")...))
}

// TestManagedClusterSourceRBAC: the ApiServerSource's account passes the permission check the
// ApiServerSource controller makes before it starts the adapter (a SubjectAccessReview of get,
// list and watch in the source's namespace, pkg/reconciler/apiserversource), can list and watch
// ManagedClusters as the adapter does, and can write nothing.
func TestManagedClusterSourceRBAC(t *testing.T) {
	h := rbacHub(t)
	const sa = "managedcluster-source"
	for _, verb := range []string{"get", "list", "watch"} {
		t.Run("controller check "+verb, func(t *testing.T) {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: serviceAccountUser(Namespace, sa),
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: Namespace, Verb: verb, Group: clusterv1.GroupName, Resource: "managedclusters",
				},
			}}
			res, err := h.Kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Status.Allowed {
				t.Errorf("%s managedclusters denied: %s", verb, res.Status.Reason)
			}
		})
	}
	_, kube, cc := as(t, h, Namespace, sa)
	table := []access{
		listManagedClusters, watchManagedClusters, getManagedCluster,
		with(false, getScore),
		with(false, createScore("src")),
	}
	checkAccess(t, kube, cc, append(table, neverAllowed...))
}

// TestHealthScorerRBAC: the health-scorer's account is granted exactly list and watch on
// managedclusters, by one ClusterRole bound to it alone; with it, the scorer's own informer
// (pkg/scorer/health) lists and watches the hub's clusters; and it can do nothing else, not even
// get one.
func TestHealthScorerRBAC(t *testing.T) {
	h := rbacHub(t)
	s := load(t, setHub)
	const sa = "health-scorer"
	want := []rbacv1.PolicyRule{{APIGroups: []string{clusterv1.GroupName}, Resources: []string{"managedclusters"}, Verbs: []string{"list", "watch"}}}
	roles := bindingsOf(s, sa)
	if len(roles) != 1 || roles[0] != "ClusterRole/scoreflow-health-scorer" {
		t.Fatalf("%s is bound to %v, want ClusterRole/scoreflow-health-scorer only", sa, roles)
	}
	role, ok := manifests.Find(s.ClusterRoles, "", "scoreflow-health-scorer")
	if !ok {
		t.Fatal("ClusterRole scoreflow-health-scorer not found")
	}
	if got := role.Object.Rules; !reflect.DeepEqual(got, want) {
		t.Errorf("%s: rules %+v, want exactly %+v", role.Source, got, want)
	}

	_, kube, cc := as(t, h, Namespace, sa)
	t.Run("the scorer lists as deployed", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		clusters := health.WatchClusters(ctx, cc, slog.New(slog.DiscardHandler))
		got, err := clusters.List(ctx)
		for err != nil && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
			got, err = clusters.List(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(got, func(mc health.ManagedCluster) bool { return mc.Metadata.Name == cluster }) {
			t.Errorf("listed %+v, want %s among them", got, cluster)
		}
	})
	table := []access{
		listManagedClusters, watchManagedClusters, with(false, getManagedCluster),
		with(false, getScore),
		with(false, createScore("health")),
	}
	checkAccess(t, kube, cc, append(table, neverAllowed...))
}

// TestAccountsWithoutGrantsHaveNoAccess: every other account deploy/ defines (scorers, sources,
// dead-letter, cloudevents-player) can read nothing on the hub, ManagedClusters included.
func TestAccountsWithoutGrantsHaveNoAccess(t *testing.T) {
	h := rbacHub(t)
	s := load(t, setHub)
	bound := boundAccounts(s)
	n := 0
	for _, it := range s.ServiceAccounts {
		sa := it.Object
		if bound[sa.Namespace+"/"+sa.Name] {
			continue
		}
		n++
		t.Run(sa.Name, func(t *testing.T) {
			_, kube, cc := as(t, h, sa.Namespace, sa.Name)
			checkAccess(t, kube, cc, append([]access{
				with(false, listManagedClusters), with(false, getManagedCluster),
				with(false, getScore),
				{"list ConfigMaps in scoreflow", func(ctx context.Context, kube kubernetes.Interface, _ clusterclient.Interface) error {
					_, err := kube.CoreV1().ConfigMaps(Namespace).List(ctx, metav1.ListOptions{})
					return err
				}, false},
			}, neverAllowed...))
		})
	}
	if n < 5 {
		t.Errorf("only %d accounts without grants; expected every scorer's", n)
	}
}

// writeAs runs the real pkg/scorewriter Writer with the clients of an account and submits one
// update; it returns the item's outcome.
func writeAs(t *testing.T, w *scorewriter.Writer, resource string, value float64, observed time.Time) contract.ItemResult {
	t.Helper()
	u := scorewriter.NewUpdate(scorewriter.Key{Cluster: cluster, Resource: resource},
		[]contract.Score{{Name: "cpuAvailable", Value: value}}, observed, observed.Add(time.Hour), "test/deploy")
	if err := w.Submit(u); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := u.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func startWriter(t *testing.T, cc clusterclient.Interface) *scorewriter.Writer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	// The writer's ManagedCluster informer needs list and watch; it must sync under this RBAC.
	mcs := scorewriter.WatchManagedClusters(ctx, cc)
	deadline := time.Now().Add(30 * time.Second)
	for mcs.Ready() != nil {
		if time.Now().After(deadline) {
			cancel()
			t.Fatal("ManagedCluster informer did not sync under the writer's RBAC")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if fe := mcs.Admit(cluster); fe != nil {
		t.Errorf("informer does not admit ManagedCluster %s: %v", cluster, fe)
	}
	var w *scorewriter.Writer
	metrics := scorewriter.NewMetrics(prometheus.NewRegistry(), func() float64 { return float64(w.Pending()) })
	opts := scorewriter.DefaultOptions()
	opts.RetryFor = 2 * time.Second
	opts.DeleteEmptyAfter = time.Second // objects left without scores go at once
	opts.Clusters = mcs
	w, err := scorewriter.NewWriter(cc, opts, metrics, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// emptied writes a score valid for a second to resource and reports whether, once it has
// expired and the grace period (a second) has passed, the writer has deleted the object.
func emptied(t *testing.T, h *localhub.Hub, w *scorewriter.Writer, resource string) bool {
	t.Helper()
	now := time.Now()
	u := scorewriter.NewUpdate(scorewriter.Key{Cluster: cluster, Resource: resource}, []contract.Score{{Name: "a", Value: 1}}, now, now.Add(time.Second), "test/deploy")
	if err := w.Submit(u); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if r, err := u.Result(ctx); err != nil || r.Outcome != contract.OutcomeWritten {
		t.Fatalf("write: %+v %v", r, err)
	}
	deleteAfter(t, h.Cluster.ClusterV1alpha1().AddOnPlacementScores(cluster).Delete, resource)
	for deadline := now.Add(8 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := h.Cluster.ClusterV1alpha1().AddOnPlacementScores(cluster).Get(ctx, resource, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return true
		}
	}
	return false
}

// writerReady reports whether w becomes ready (its AddOnPlacementScore informer synced) within d.
func writerReady(w *scorewriter.Writer, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if w.Ready() == nil {
			return true
		}
	}
	return false
}

// TestScoreWriterEndToEndUnderRBAC runs the real writer (pkg/scorewriter) as the writer's account:
// its ManagedCluster informer syncs, a first score creates the AddOnPlacementScore and writes its
// status, a newer one updates it, and both land with the order ledger. Then the writer runs bound
// to copies of the deployed ClusterRole that each lack one grant it relies on, and its writes are
// forbidden: every grant is needed, and the test would notice a writer that stopped working under
// the deployed RBAC.
func TestScoreWriterEndToEndUnderRBAC(t *testing.T) {
	h := rbacHub(t)
	s := load(t, setHub)
	t0 := time.Now().Add(-time.Minute).Truncate(time.Second)

	t.Run("as deployed", func(t *testing.T) {
		_, _, cc := as(t, h, Namespace, "score-writer")
		w := startWriter(t, cc)
		if !writerReady(w, 30*time.Second) {
			t.Fatal("the writer's AddOnPlacementScore informer did not sync under the writer's RBAC")
		}
		for i, v := range []float64{42, 43} {
			if r := writeAs(t, w, "rbac-e2e", v, t0.Add(time.Duration(i)*time.Second)); r.Outcome != contract.OutcomeWritten {
				t.Fatalf("write %d (%v): %+v", i+1, v, r)
			}
		}
		obj, err := h.Cluster.ClusterV1alpha1().AddOnPlacementScores(cluster).Get(context.Background(), "rbac-e2e", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(obj.Status.Scores) != 1 || obj.Status.Scores[0].Name != "cpuAvailable" || obj.Status.Scores[0].Value != 43 {
			t.Errorf("status scores %+v, want cpuAvailable=43", obj.Status.Scores)
		}
		if meta.FindStatusCondition(obj.Status.Conditions, scorewriter.ConditionObservations) == nil {
			t.Errorf("no %s condition: the order ledger was not written", scorewriter.ConditionObservations)
		}
		if !emptied(t, h, w, "rbac-e2e-empty") {
			t.Error("an object left without scores was not deleted after its grace period")
		}
	})

	deployed, ok := manifests.Find(s.ClusterRoles, "", "scoreflow-score-writer")
	if !ok {
		t.Fatal("ClusterRole scoreflow-score-writer not found")
	}
	// The informer needs list or watch to sync (an API server with streaming lists fills it by
	// watch alone, an older one lists), and both to follow the hub: without them the writer never
	// becomes ready.
	for _, tt := range []struct {
		resource string
		verbs    []string
	}{
		{"addonplacementscores", []string{"list", "watch"}},
		{"addonplacementscores", []string{"create"}},
		{"addonplacementscores/status", []string{"update"}},
		{"addonplacementscores", []string{"delete"}},
	} {
		t.Run("without "+strings.Join(tt.verbs, ", ")+" on "+tt.resource, func(t *testing.T) {
			role := deployed.Object.DeepCopy()
			role.Name = "test-writer-without-" + strings.Join(tt.verbs, "-") + "-" + strings.ReplaceAll(tt.resource, "/", "-")
			removed := 0
			for i, r := range role.Rules {
				if slices.Contains(r.Resources, tt.resource) {
					role.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool {
						if slices.Contains(tt.verbs, v) {
							removed++
							return true
						}
						return false
					})
				}
			}
			if removed != len(tt.verbs) {
				t.Fatalf("the deployed ClusterRole does not grant %v on %s", tt.verbs, tt.resource)
			}
			// A rule left with no verb is invalid: drop it.
			role.Rules = slices.DeleteFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return len(r.Verbs) == 0 })
			sa := role.Name
			ctx := context.Background()
			for _, err := range []error{
				createIgnoreExists(h.Kube.CoreV1().ServiceAccounts(Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: Namespace}}, metav1.CreateOptions{})),
				createIgnoreExists(h.Kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})),
				createIgnoreExists(h.Kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
					ObjectMeta: metav1.ObjectMeta{Name: role.Name},
					RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
					Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: Namespace}},
				}, metav1.CreateOptions{})),
			} {
				if err != nil {
					t.Fatal(err)
				}
			}
			_, _, cc := as(t, h, Namespace, sa)
			w := startWriter(t, cc)
			switch tt.verbs[0] {
			case "list":
				if writerReady(w, 5*time.Second) {
					t.Error("the writer became ready without list and watch on addonplacementscores")
				}
				return
			case "delete":
				if !writerReady(w, 30*time.Second) {
					t.Fatal("not ready")
				}
				if emptied(t, h, w, role.Name) {
					t.Error("an object left without scores was deleted without delete on addonplacementscores")
				}
				return
			}
			r := writeAs(t, w, role.Name, 10, t0)
			if r.Outcome != contract.OutcomeFailed || r.Reason != contract.ReasonForbidden {
				t.Errorf("write: %+v, want Failed/Forbidden", r)
			}
		})
	}
}

func createIgnoreExists[T any](_ T, err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// withoutGrant is a copy of role named name that lacks one grant: verb on res of rule ri. The
// rule loses res, res gets the rule's other verbs back in a rule of its own, and rules left empty
// are dropped, so exactly one (verb, resource) pair is gone.
func withoutGrant(role *rbacv1.ClusterRole, name string, ri int, res, verb string) *rbacv1.ClusterRole {
	rule := role.Rules[ri]
	out := role.DeepCopy()
	out.Name = name
	out.Rules[ri].Resources = slices.DeleteFunc(slices.Clone(rule.Resources), func(r string) bool { return r == res })
	if rest := slices.DeleteFunc(slices.Clone(rule.Verbs), func(v string) bool { return v == verb }); len(rest) > 0 {
		out.Rules = append(out.Rules, rbacv1.PolicyRule{APIGroups: rule.APIGroups, Resources: []string{res}, ResourceNames: rule.ResourceNames, Verbs: rest})
	}
	out.Rules = slices.DeleteFunc(out.Rules, func(r rbacv1.PolicyRule) bool { return len(r.Resources) == 0 })
	return out
}

// bindToNewAccount creates role and a ServiceAccount of the role's name bound to it alone.
func bindToNewAccount(ctx context.Context, t *testing.T, h *localhub.Hub, role *rbacv1.ClusterRole) {
	t.Helper()
	name := role.Name
	for _, err := range []error{
		createIgnoreExists(h.Kube.CoreV1().ServiceAccounts(Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace}}, metav1.CreateOptions{})),
		createIgnoreExists(h.Kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})),
		createIgnoreExists(h.Kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: Namespace}},
		}, metav1.CreateOptions{})),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// bindingsOf names what binds ServiceAccount sa of Namespace in s: "ClusterRole/<name>" per
// ClusterRoleBinding, "RoleBinding <name>" per RoleBinding.
func bindingsOf(s *manifests.Set, sa string) []string {
	var roles []string
	for _, it := range s.ClusterRoleBindings {
		for _, sub := range it.Object.Subjects {
			if sub.Kind == rbacv1.ServiceAccountKind && sub.Namespace == Namespace && sub.Name == sa {
				roles = append(roles, it.Object.RoleRef.Kind+"/"+it.Object.RoleRef.Name)
			}
		}
	}
	for _, it := range s.RoleBindings {
		for _, sub := range it.Object.Subjects {
			if sub.Kind == rbacv1.ServiceAccountKind && sub.Namespace == Namespace && sub.Name == sa {
				roles = append(roles, "RoleBinding "+it.Object.Name)
			}
		}
	}
	return roles
}
