package hubtoken

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonclient "open-cluster-management.io/api/client/addon/clientset/versioned"
	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/harness/localhub"
)

const addon = "scoreflow-latency-agent"

// agentRole is the ClusterRole addon/ gives the latency agent in its cluster's namespace.
func agentRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	raw, err := os.ReadFile("../../addon/00-hub-identity.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var r rbacv1.ClusterRole
		if err := yaml.UnmarshalStrict([]byte(doc), &r); err == nil && r.Kind == "ClusterRole" && r.Name == addon {
			return &r
		}
	}
	t.Fatal("addon/00-hub-identity.yaml has no ClusterRole " + addon)
	return nil
}

func agentUser(cluster string) string {
	return "system:open-cluster-management:cluster:" + cluster + ":addon:" + addon + ":agent:" + addon
}

// hubWithAddon is a hub with cluster1 and cluster2, the addon enabled on both, and each agent's
// identity bound to addon/'s ClusterRole in its own cluster's namespace, as OCM's addon manager
// binds it (hubPermissions CurrentCluster).
func hubWithAddon(t *testing.T) (*localhub.Hub, map[string]*addonv1alpha1.ManagedClusterAddOn) {
	t.Helper()
	ctx := t.Context()
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	if err := hub.InstallAddonCRDs(); err != nil {
		t.Fatal(err)
	}
	if _, err := hub.Kube.RbacV1().ClusterRoles().Create(ctx, agentRole(t), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	addons := addonclient.NewForConfigOrDie(hub.Config)
	mcas := map[string]*addonv1alpha1.ManagedClusterAddOn{}
	for _, c := range []string{"cluster1", "cluster2"} {
		if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		mca, err := addons.AddonV1alpha1().ManagedClusterAddOns(c).Create(ctx, &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: addon, Namespace: c}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mcas[c] = mca
		if _, err := hub.Kube.RbacV1().RoleBindings(c).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "agent"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: addon},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: agentUser(c)}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return hub, mcas
}

func agentConfig(hub *localhub.Hub, cluster string) *rest.Config {
	cfg := rest.CopyConfig(hub.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: agentUser(cluster)}
	return cfg
}

func minterFor(t *testing.T, hub *localhub.Hub, identity, cluster string) *Minter {
	t.Helper()
	cfg := agentConfig(hub, identity)
	return &Minter{Client: kubernetes.NewForConfigOrDie(cfg), Metadata: metadata.NewForConfigOrDie(cfg), Cluster: cluster, Addon: addon,
		File: filepath.Join(t.TempDir(), "token"), Log: slog.Default()}
}

// cluster1's agent, with addon/'s rights only, creates its hub ServiceAccount owned by its
// ManagedClusterAddOn and mints a one-hour token of it for the gateway's audience, which the hub
// authenticates as system:serviceaccount:cluster1:scoreflow-latency-agent; a second refresh finds
// the ServiceAccount and mints again. In cluster2's namespace it can do nothing, and a refused
// refresh leaves the token file as it was.
func TestMintsTheAgentsOwnToken(t *testing.T) {
	ctx := t.Context()
	hub, mcas := hubWithAddon(t)
	m := minterFor(t, hub, "cluster1", "cluster1")
	next, err := m.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(next); d < 25*time.Minute || d > 31*time.Minute {
		t.Errorf("next refresh in %s, want half of the hour's lifetime", d)
	}
	sa, err := hub.Kube.CoreV1().ServiceAccounts("cluster1").Get(ctx, addon, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if o := sa.OwnerReferences; len(o) != 1 || o[0].Kind != "ManagedClusterAddOn" || o[0].UID != mcas["cluster1"].UID || o[0].BlockOwnerDeletion != nil {
		t.Errorf("ServiceAccount owners %+v, want the ManagedClusterAddOn (uid %s) without blockOwnerDeletion", o, mcas["cluster1"].UID)
	}
	token := review(t, ctx, hub, m.File, "system:serviceaccount:cluster1:"+addon, time.Hour)
	if _, err := m.Refresh(ctx); err != nil {
		t.Fatalf("second refresh: %v", err)
	}
	if again, _ := os.ReadFile(m.File); string(again) == token {
		t.Error("the second refresh did not replace the token")
	}

	other := minterFor(t, hub, "cluster1", "cluster2")
	other.File = m.File
	before, _ := os.ReadFile(m.File)
	if _, err := other.Refresh(ctx); !apierrors.IsForbidden(err) {
		t.Errorf("cluster1's agent minting in cluster2's namespace: %v, want Forbidden", err)
	}
	if after, _ := os.ReadFile(m.File); string(after) != string(before) {
		t.Error("a refused refresh changed the token file")
	}
	if entries, _ := os.ReadDir(filepath.Dir(m.File)); len(entries) != 1 {
		t.Errorf("temporary files left beside the token: %v", entries)
	}
	// Another ServiceAccount of its own namespace: it may create one, never mint its tokens.
	stranger := minterFor(t, hub, "cluster1", "cluster1")
	stranger.Addon = "score-writer"
	if _, err := hub.Kube.CoreV1().ServiceAccounts("cluster1").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "score-writer"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := stranger.Refresh(ctx); !apierrors.IsForbidden(err) {
		t.Errorf("cluster1's agent minting another ServiceAccount's token: %v, want Forbidden", err)
	}

	t.Run("start from flags", func(t *testing.T) { startFromFlags(t, hub) })
}

// review checks that the token in file authenticates as user for the gateway's audience and lives
// lifetime, and returns it.
func review(t *testing.T, ctx context.Context, hub *localhub.Hub, file, user string, lifetime time.Duration) string {
	t.Helper()
	token, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r, err := hub.Kube.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: string(token), Audiences: []string{Audience}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Status.Authenticated || r.Status.User.Username != user {
		t.Errorf("the minted token authenticates as %+v (error %q), want %s", r.Status.User, r.Status.Error, user)
	}
	return string(token)
}

// startFromFlags: Start, as the agent calls it, from flags, mints at once into the token file;
// settings the gateway would refuse are refused at start.
func startFromFlags(t *testing.T, hub *localhub.Hub) {
	ctx := t.Context()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := localhub.WriteKubeconfig(agentConfig(hub, "cluster2"), kubeconfig); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	f := RegisterFlags(fs)
	if err := fs.Parse([]string{"--hub-kubeconfig", kubeconfig, "--hub-token-addon", addon}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := f.Start(ctx, slog.Default(), "cluster2", file); err != nil {
		t.Fatal(err)
	}
	review(t, ctx, hub, file, "system:serviceaccount:cluster2:"+addon, time.Hour)

	for _, args := range [][]string{
		{"--hub-token-addon", ""},
		{"--hub-token-addon", addon, "--hub-token-lifetime", "2h"},
		{"--hub-token-addon", addon, "--hub-token-lifetime", "5m"},
	} {
		fs := flag.NewFlagSet("agent", flag.ContinueOnError)
		bad := RegisterFlags(fs)
		if err := fs.Parse(append([]string{"--hub-kubeconfig", kubeconfig}, args...)); err != nil {
			t.Fatal(err)
		}
		if err := bad.Start(ctx, slog.Default(), "cluster2", file); err == nil {
			t.Errorf("Start with %v was accepted", args)
		}
	}
}
