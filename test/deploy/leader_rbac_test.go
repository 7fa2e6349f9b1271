package deploy

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
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

	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/pkg/leader"
)

// leaseUser is a function that runs background work under a Lease (pkg/leader), as deployed.
type leaseUser struct {
	workload, account, lease string
	source                   manifests.Source
}

// leaderAddFlags finds a function's leader.AddFlags call and the Lease it names by default.
var leaderAddFlags = regexp.MustCompile(`leader\.AddFlags\([^,]+,\s*"([^"]+)"\)`)

// leaseUsers are the workloads of s whose function campaigns for a Lease, with the Lease each
// campaigns for (its LEADER_ELECT_LEASE, else the name its main gives leader.AddFlags). A
// function whose deployment turns leader election off is a failure: two replicas would both work.
func leaseUsers(t *testing.T, s *manifests.Set) []leaseUser {
	t.Helper()
	var out []leaseUser
	for _, w := range s.Workloads() {
		c := w.Template.Spec.Containers
		if len(c) != 1 {
			continue
		}
		fn := functionName(c[0].Image)
		if fn == "" {
			continue
		}
		src, err := os.ReadFile(filepath.Join(repo, "functions", fn, "main.go"))
		if err != nil {
			t.Fatal(err)
		}
		m := leaderAddFlags.FindSubmatch(src)
		if m == nil {
			continue
		}
		if v := envValue(c[0], "LEADER_ELECT"); v == "false" {
			t.Errorf("%s: %s runs with LEADER_ELECT=false: a second replica would do its work again", w.Source, w.ObjectMeta.Name)
		}
		lease := string(m[1])
		if v := envValue(c[0], "LEADER_ELECT_LEASE"); v != "" {
			lease = v
		}
		out = append(out, leaseUser{workload: w.ObjectMeta.Name, account: w.Template.Spec.ServiceAccountName, lease: lease, source: w.Source})
	}
	return out
}

// TestLeaderElectionRBAC: every function that campaigns for a Lease (the metric-watcher's
// polling, the optimizer's compliance marking, the score-writer's expiry and masks) can lead with
// exactly deploy/'s RBAC, as its own account: a real pkg/leader Elector against a real API server
// is elected, and, while it leads, the account is refused every other Lease, the Leases of other
// namespaces, listing, watching and deleting them. Then copies of its Role that each lack one
// grant cannot lead at all, so none is spare.
func TestLeaderElectionRBAC(t *testing.T) {
	h := rbacHub(t)
	s := load(t, setHub)
	users := leaseUsers(t, s)
	var names []string
	for _, u := range users {
		names = append(names, u.workload)
	}
	for _, want := range []string{"metric-watcher", "optimizer", "score-writer"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s does not campaign for a Lease (found %v)", want, names)
		}
	}
	for _, u := range users {
		t.Run(u.workload, func(t *testing.T) {
			_, kube, cc := as(t, h, Namespace, u.account)
			ctx := context.Background()
			deleteLease(t, h, u.lease)
			stop := lead(t, kube, u.lease, 20*time.Second)
			other := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "someone-elses", Namespace: Namespace}}
			if _, err := h.Kube.CoordinationV1().Leases(Namespace).Create(ctx, other, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			checkAccess(t, kube, cc, []access{
				{"get another Lease", func(ctx context.Context, kube kubernetes.Interface, _ clusterclient.Interface) error {
					_, err := kube.CoordinationV1().Leases(Namespace).Get(ctx, "someone-elses", metav1.GetOptions{})
					return err
				}, false},
				{"update another Lease", func(ctx context.Context, kube kubernetes.Interface, _ clusterclient.Interface) error {
					l := other.DeepCopy()
					l.Spec.HolderIdentity = new(string)
					_, err := kube.CoordinationV1().Leases(Namespace).Update(ctx, l, metav1.UpdateOptions{})
					return err
				}, false},
				{"delete its own Lease", func(ctx context.Context, kube kubernetes.Interface, _ clusterclient.Interface) error {
					return kube.CoordinationV1().Leases(Namespace).Delete(ctx, u.lease, metav1.DeleteOptions{})
				}, false},
				{"list Leases", func(ctx context.Context, kube kubernetes.Interface, _ clusterclient.Interface) error {
					_, err := kube.CoordinationV1().Leases(Namespace).List(ctx, metav1.ListOptions{})
					return err
				}, false},
				{"watch Leases", func(ctx context.Context, kube kubernetes.Interface, _ clusterclient.Interface) error {
					w, err := kube.CoordinationV1().Leases(Namespace).Watch(ctx, metav1.ListOptions{})
					if err == nil {
						w.Stop()
					}
					return err
				}, false},
				{"get its Lease in kube-system", func(ctx context.Context, kube kubernetes.Interface, _ clusterclient.Interface) error {
					_, err := kube.CoordinationV1().Leases("kube-system").Get(ctx, u.lease, metav1.GetOptions{})
					return err
				}, false},
				{"create a Lease in kube-system", func(ctx context.Context, kube kubernetes.Interface, _ clusterclient.Interface) error {
					_, err := kube.CoordinationV1().Leases("kube-system").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: u.lease}}, metav1.CreateOptions{})
					return err
				}, false},
			})
			stop()
		})
	}
}

// TestLeaderElectionNeedsEveryGrant: a copy of each lease-holding account's leader Role without
// one of its verbs cannot take the Lease: without create when the Lease does not exist yet,
// without get or update when it does (free, as a leader leaves it on the way out).
func TestLeaderElectionNeedsEveryGrant(t *testing.T) {
	h := rbacHub(t)
	s := load(t, setHub)
	ctx := context.Background()
	n := 0
	for _, u := range leaseUsers(t, s) {
		role := leaseRole(t, s, u)
		for ri, rule := range role.Rules {
			for _, verb := range rule.Verbs {
				n++
				account := "test-" + u.workload + "-without-lease-" + verb
				t.Run(account, func(t *testing.T) {
					reduced := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: account, Namespace: Namespace}, Rules: withoutVerb(role.Rules, ri, verb)}
					sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: account, Namespace: Namespace}}
					if err := createIgnoreExists(h.Kube.CoreV1().ServiceAccounts(Namespace).Create(ctx, sa, metav1.CreateOptions{})); err != nil {
						t.Fatal(err)
					}
					if err := createIgnoreExists(h.Kube.RbacV1().Roles(Namespace).Create(ctx, reduced, metav1.CreateOptions{})); err != nil {
						t.Fatal(err)
					}
					err := createIgnoreExists(h.Kube.RbacV1().RoleBindings(Namespace).Create(ctx, &rbacv1.RoleBinding{
						ObjectMeta: metav1.ObjectMeta{Name: account, Namespace: Namespace},
						RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: account},
						Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account, Namespace: Namespace}},
					}, metav1.CreateOptions{}))
					if err != nil {
						t.Fatal(err)
					}
					deleteLease(t, h, u.lease)
					if verb != "create" {
						free := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: u.lease, Namespace: Namespace}}
						if _, err := h.Kube.CoordinationV1().Leases(Namespace).Create(ctx, free, metav1.CreateOptions{}); err != nil {
							t.Fatal(err)
						}
					}
					_, kube, _ := as(t, h, Namespace, account)
					if leads(t, kube, u.lease, 5*time.Second) {
						t.Errorf("led without %s on leases", verb)
					}
				})
			}
		}
	}
	if n < 6 {
		t.Errorf("only %d grants checked", n)
	}
}

// withoutVerb is rules with verb taken from rule ri (the rule dropped when it had no other).
func withoutVerb(rules []rbacv1.PolicyRule, ri int, verb string) []rbacv1.PolicyRule {
	out := make([]rbacv1.PolicyRule, 0, len(rules))
	for i, r := range rules {
		r = *r.DeepCopy()
		if i == ri {
			r.Verbs = slices.DeleteFunc(r.Verbs, func(v string) bool { return v == verb })
			if len(r.Verbs) == 0 {
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// leaseRole is the Role bound to u's account that grants Leases.
func leaseRole(t *testing.T, s *manifests.Set, u leaseUser) *rbacv1.Role {
	t.Helper()
	for _, rb := range s.RoleBindings {
		if rb.Object.Namespace != Namespace || rb.Object.RoleRef.Kind != "Role" || !slices.ContainsFunc(rb.Object.Subjects, func(sub rbacv1.Subject) bool {
			return sub.Kind == rbacv1.ServiceAccountKind && sub.Name == u.account && sub.Namespace == Namespace
		}) {
			continue
		}
		r, ok := manifests.Find(s.Roles, Namespace, rb.Object.RoleRef.Name)
		if ok && slices.ContainsFunc(r.Object.Rules, func(pr rbacv1.PolicyRule) bool { return slices.Contains(pr.Resources, "leases") }) {
			return r.Object
		}
	}
	t.Fatalf("%s: no Role bound to %s grants Leases", u.source, u.account)
	return nil
}

// lead starts an Elector for lease as kube's account and waits until it leads; stop ends it and
// waits until it has released the Lease.
func lead(t *testing.T, kube kubernetes.Interface, lease string, within time.Duration) (stop func()) {
	t.Helper()
	e, err := leader.New(kube, leader.Options{Namespace: Namespace, Name: lease, LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second,
		RetryPeriod: 500 * time.Millisecond, Log: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	leading := make(chan struct{})
	go func() {
		defer close(done)
		e.Run(ctx, func(ctx context.Context) { close(leading); <-ctx.Done() })
	}()
	select {
	case <-leading:
	case <-time.After(within):
		cancel()
		<-done
		t.Fatalf("not elected for Lease %s within %s", lease, within)
	}
	return func() { cancel(); <-done }
}

// leads reports whether an Elector for lease as kube's account is elected within d.
func leads(t *testing.T, kube kubernetes.Interface, lease string, d time.Duration) bool {
	t.Helper()
	e, err := leader.New(kube, leader.Options{Namespace: Namespace, Name: lease, LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second,
		RetryPeriod: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	led := false
	e.Run(ctx, func(context.Context) { led = true; cancel() })
	return led
}

// deleteLease removes lease as the admin, so the next campaign starts from nothing.
func deleteLease(t *testing.T, h *localhub.Hub, lease string) {
	t.Helper()
	err := h.Kube.CoordinationV1().Leases(Namespace).Delete(context.Background(), lease, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
