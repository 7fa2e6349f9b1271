package hubtoken

import (
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/scoreflow/scoreflow/harness/localhub"
)

const audience = "eventing.knative.dev/broker/scoreflow/scoreflow"

// An agent whose hub identity may only create tokens of scoreflow/latency-agent (as the addon's
// Role grants) mints one for the broker's audience into its token file; the hub authenticates it
// as that ServiceAccount for that audience. Another ServiceAccount's token is refused and leaves
// the file as it was.
func TestMintsTheBrokerToken(t *testing.T) {
	ctx := t.Context()
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	kube := hub.Kube
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "scoreflow"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{"latency-agent", "score-writer"} {
		if _, err := kube.CoreV1().ServiceAccounts("scoreflow").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const agentUser = "system:open-cluster-management:cluster:cluster1:addon:scoreflow-latency-agent:agent:scoreflow-latency-agent"
	if _, err := kube.RbacV1().Roles("scoreflow").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "mint"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{"latency-agent"}, Verbs: []string{"create"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().RoleBindings("scoreflow").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "mint"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "mint"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: agentUser}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(hub.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: agentUser}
	agent := kubernetes.NewForConfigOrDie(cfg)

	file := filepath.Join(t.TempDir(), "token")
	m := &Minter{Client: agent, Namespace: "scoreflow", Name: "latency-agent", Audience: audience, File: file, Lifetime: time.Hour, Log: slog.Default()}
	next, err := m.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(next); d < 25*time.Minute || d > 31*time.Minute {
		t.Errorf("next refresh in %s, want half of the hour's lifetime", d)
	}
	token, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	review, err := kube.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: string(token), Audiences: []string{audience}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !review.Status.Authenticated || review.Status.User.Username != "system:serviceaccount:scoreflow:latency-agent" {
		t.Errorf("the minted token authenticates as %+v (error %q), want scoreflow/latency-agent", review.Status.User, review.Status.Error)
	}

	other := *m
	other.Name = "score-writer"
	if _, err := other.Refresh(ctx); !apierrors.IsForbidden(err) {
		t.Errorf("minting another ServiceAccount's token: %v, want Forbidden", err)
	}
	if again, _ := os.ReadFile(file); string(again) != string(token) {
		t.Error("a refused refresh changed the token file")
	}
	if entries, _ := os.ReadDir(filepath.Dir(file)); len(entries) != 1 {
		t.Errorf("temporary files left beside the token: %v", entries)
	}

	t.Run("start from flags", func(t *testing.T) { startFromFlags(t, hub) })
}

// startFromFlags: Start, as the agent calls it, from flags, mints at once into the token file.
func startFromFlags(t *testing.T, hub *localhub.Hub) {
	ctx := t.Context()
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	f := RegisterFlags(fs)
	if err := fs.Parse([]string{"--hub-kubeconfig", hub.KubeconfigPath(), "--hub-token-service-account", "scoreflow/latency-agent", "--hub-token-audience", audience}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := f.Start(ctx, slog.Default(), file); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(file); err != nil || len(b) == 0 {
		t.Fatalf("no token in %s after Start: %v", file, err)
	}

	bad := RegisterFlags(flag.NewFlagSet("agent", flag.ContinueOnError))
	*bad.kubeconfig, *bad.serviceAccount, *bad.audience = hub.KubeconfigPath(), "latency-agent", audience
	if err := bad.Start(ctx, slog.Default(), file); err == nil {
		t.Error("a service account without namespace was accepted")
	}
}
