package deploy

import (
	"context"
	"log/slog"
	"reflect"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"

	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/pkg/leader"
)

// writerLease is the Lease of the score-writer's leader election (functions/score-writer).
const writerLease = "score-writer"

// leaseAccess is a request on a Lease in ns named name.
func leaseAccess(what, ns, name string, allowed bool, do func(ctx context.Context, leases leaseClient, name string) error) access {
	return access{what, func(ctx context.Context, kube kubernetes.Interface, _ clusterclient.Interface) error {
		return do(ctx, kube.CoordinationV1().Leases(ns), name)
	}, allowed}
}

type leaseClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
	List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

func getLease(ctx context.Context, l leaseClient, name string) error {
	_, err := l.Get(ctx, name, metav1.GetOptions{})
	return err
}

func createLease(ctx context.Context, l leaseClient, name string) error {
	_, err := l.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return err
}

func updateLease(ctx context.Context, l leaseClient, name string) error {
	_, err := l.Update(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.UpdateOptions{})
	return err
}

// ensureLease creates the writer's Lease as an administrator, without a holder, if it is missing.
func ensureLease(t *testing.T, kube kubernetes.Interface) {
	t.Helper()
	_, err := kube.CoordinationV1().Leases(Namespace).Create(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: writerLease}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// leads reports whether an elector for the writer's Lease, acting through kube, comes to lead
// within d.
func leads(t *testing.T, kube kubernetes.Interface, d time.Duration) bool {
	t.Helper()
	e, err := leader.New(kube, leader.Options{Namespace: Namespace, Name: writerLease, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second,
		RetryPeriod: 200 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	led := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Run(ctx, func(ctx context.Context) {
			close(led)
			<-ctx.Done()
		})
	}()
	defer func() { cancel(); <-done }()
	select {
	case <-led:
		return true
	case <-time.After(d):
		return false
	}
}

// TestScoreWriterLeaseRBAC: the writer's account holds its Lease under one Role granting create on
// Leases and get and update on its own Lease only; with it the writer's elector (pkg/leader) leads,
// and without any one of the three grants it never does; every other Lease request is refused.
func TestScoreWriterLeaseRBAC(t *testing.T) {
	h := rbacHub(t)
	s := load(t, setHub)
	deployed, ok := manifests.Find(s.Roles, Namespace, "scoreflow-score-writer-lease")
	if !ok {
		t.Fatal("Role scoreflow-score-writer-lease not found")
	}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{writerLease}, Verbs: []string{"get", "update"}},
	}
	if got := deployed.Object.Rules; !reflect.DeepEqual(got, want) {
		t.Errorf("%s: rules %+v, want exactly %+v", deployed.Source, got, want)
	}
	if roles := bindingsOf(s, "score-writer"); !slices.Contains(roles, "RoleBinding scoreflow-score-writer-lease") {
		t.Errorf("score-writer is bound to %v, not to the Lease's Role", roles)
	}

	_, kube, cc := as(t, h, Namespace, "score-writer")
	ensureLease(t, h.Kube)
	t.Run("the elector leads as deployed", func(t *testing.T) {
		if !leads(t, kube, 20*time.Second) {
			t.Fatal("the writer's elector did not lead under its Role")
		}
	})
	const other = "rbac-other-lease"
	if err := createLease(context.Background(), h.Kube.CoordinationV1().Leases(Namespace), other); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	deleteAfter(t, h.Kube.CoordinationV1().Leases(Namespace).Delete, other)
	deleteAfter(t, h.Kube.CoordinationV1().Leases(Namespace).Delete, "rbac-created")
	checkAccess(t, kube, cc, []access{
		leaseAccess("get its Lease", Namespace, writerLease, true, getLease),
		leaseAccess("create a Lease", Namespace, "rbac-created", true, createLease),
		leaseAccess("get another Lease", Namespace, other, false, getLease),
		leaseAccess("update another Lease", Namespace, other, false, updateLease),
		leaseAccess("delete its Lease", Namespace, writerLease, false, func(ctx context.Context, l leaseClient, name string) error {
			return l.Delete(ctx, name, metav1.DeleteOptions{})
		}),
		leaseAccess("list Leases", Namespace, "", false, func(ctx context.Context, l leaseClient, _ string) error {
			_, err := l.List(ctx, metav1.ListOptions{})
			return err
		}),
		leaseAccess("create a Lease in another namespace", "default", "rbac-elsewhere", false, createLease),
		leaseAccess("get its Lease's name in another namespace", "default", writerLease, false, getLease),
	})

	for _, tt := range []struct {
		verb string
		// prepare leaves the Lease as the grant's absence matters: missing for create (which
		// is then needed), present for get and update.
		leaseExists bool
	}{{"create", false}, {"get", true}, {"update", true}} {
		t.Run("without "+tt.verb, func(t *testing.T) {
			ctx := context.Background()
			role := deployed.Object.DeepCopy()
			role.Name = "test-writer-lease-without-" + tt.verb
			role.ResourceVersion = ""
			for i := range role.Rules {
				role.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(role.Rules[i].Verbs), func(v string) bool { return v == tt.verb })
			}
			role.Rules = slices.DeleteFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return len(r.Verbs) == 0 })
			sa := role.Name
			for _, err := range []error{
				createIgnoreExists(h.Kube.CoreV1().ServiceAccounts(Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: Namespace}}, metav1.CreateOptions{})),
				createIgnoreExists(h.Kube.RbacV1().Roles(Namespace).Create(ctx, role, metav1.CreateOptions{})),
				createIgnoreExists(h.Kube.RbacV1().RoleBindings(Namespace).Create(ctx, &rbacv1.RoleBinding{
					ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: Namespace},
					RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
					Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: Namespace}},
				}, metav1.CreateOptions{})),
			} {
				if err != nil {
					t.Fatal(err)
				}
			}
			if err := h.Kube.CoordinationV1().Leases(Namespace).Delete(ctx, writerLease, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			if tt.leaseExists {
				ensureLease(t, h.Kube)
			}
			_, kube, _ := as(t, h, Namespace, sa)
			if leads(t, kube, 5*time.Second) {
				t.Errorf("the elector led without %s on its Lease", tt.verb)
			}
		})
	}
	// The Lease as the writer finds it: present, no holder.
	if err := h.Kube.CoordinationV1().Leases(Namespace).Delete(context.Background(), writerLease, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
