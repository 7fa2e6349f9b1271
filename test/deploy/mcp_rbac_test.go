package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"

	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/pkg/mcpserver"
	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

const (
	mcpNamespace = optNamespace
	mcpPlacement = "mcp-explain"
	mcpToken     = "mcp-rbac-read"
	// mcpElsewhere is a namespace the MCP server's NAMESPACES does not list.
	mcpElsewhere = "mcp-elsewhere"
)

// seedMCP adds to the optimizer's seed a Placement whose AddOn prioritizer names the seeded score,
// for explain_placement, and the same Placement in mcpElsewhere.
func seedMCP(t *testing.T, h *localhub.Hub) {
	t.Helper()
	seedOptimizer(t, h)
	ctx := context.Background()
	if _, err := h.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mcpElsewhere}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, ns := range []string{mcpNamespace, mcpElsewhere} {
		_, err := h.Cluster.ClusterV1beta1().Placements(ns).Create(ctx,
			localhub.ScorePlacement(ns, mcpPlacement, "default", "opt-score", "app01;2g", 1), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// mcpNamespaces is the deployed MCP server's NAMESPACES.
func mcpNamespaces(t *testing.T, s *manifests.Set) []string {
	t.Helper()
	svc, ok := manifests.Find(s.Services, Namespace, "mcp-server")
	if !ok {
		t.Fatal("Service mcp-server not found")
	}
	var out []string
	for _, n := range strings.Split(envValue(svc.Object.Spec.Template.Spec.Containers[0], "NAMESPACES"), ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// mcpAs serves the real MCP server reading the hub as ServiceAccount scoreflow/sa, for the
// namespaces of its deployment, and returns its /mcp URL (a static read token admits the test's
// client).
func mcpAs(t *testing.T, h *localhub.Hub, sa string) string {
	t.Helper()
	_, _, cc := as(t, h, Namespace, sa)
	tok := filepath.Join(t.TempDir(), "read")
	if err := os.WriteFile(tok, []byte(mcpToken), 0o600); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcpserver.Handler(mcpserver.Config{Cluster: cc, OptimizerURL: "http://127.0.0.1:1", ReadTokenFile: tok,
		Namespaces: mcpNamespaces(t, load(t, setHub)), Log: slog.New(slog.NewJSONHandler(io.Discard, nil))}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

type bearerRT string

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// mcpReadTools calls every read tool through the SDK's client and checks each sees the seeded
// score (42 for app01;2g on cluster1), and that explain_placement refuses the Placement in
// mcpElsewhere; it returns the first tool error or wrong answer.
func mcpReadTools(ctx context.Context, url string) error {
	c := mcp.NewClient(&mcp.Implementation{Name: "rbac-test", Version: "v1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerRT(mcpToken)}, MaxRetries: -1}, nil)
	if err != nil {
		return err
	}
	defer cs.Close()
	call := func(tool string, args map[string]any, out any) error {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			return fmt.Errorf("%s: %w", tool, err)
		}
		if res.IsError {
			var b strings.Builder
			for _, c := range res.Content {
				if tc, ok := c.(*mcp.TextContent); ok {
					b.WriteString(tc.Text)
				}
			}
			return fmt.Errorf("%s: %s", tool, b.String())
		}
		raw, _ := json.Marshal(res.StructuredContent)
		return json.Unmarshal(raw, out)
	}
	var scores mcpserver.ScoresOutput
	if err := call("list_scores", map[string]any{"resource": "opt-score"}, &scores); err != nil {
		return err
	}
	if len(scores.Items) != 1 || scores.Items[0].Scores["app01;2g"] != 42 {
		return fmt.Errorf("list_scores: %+v", scores)
	}
	var sum mcpserver.SummaryOutput
	if err := call("summarize_scores", map[string]any{"resource": "opt-score"}, &sum); err != nil {
		return err
	}
	if len(sum.Summaries) != 1 || sum.Summaries[0].Max != 42 {
		return fmt.Errorf("summarize_scores: %+v", sum)
	}
	if err := call("explain_placement", map[string]any{"namespace": mcpElsewhere, "name": mcpPlacement}, &mcpserver.PlacementOutput{}); err == nil ||
		!strings.Contains(err.Error(), "refused: this server reads Placements only in") {
		return fmt.Errorf("explain_placement in %s, which NAMESPACES does not list: %v, want a refusal", mcpElsewhere, err)
	}
	var ex mcpserver.PlacementOutput
	if err := call("explain_placement", map[string]any{"namespace": mcpNamespace, "name": mcpPlacement}, &ex); err != nil {
		return err
	}
	for _, e := range ex.Clusters {
		if e.Cluster == cluster && e.Total == 42 {
			return nil
		}
	}
	return fmt.Errorf("explain_placement: %+v", ex)
}

// TestMCPServerRolePerNamespace: the MCP server reads Placements and their decisions through a
// Role in each namespace its deployment lists, bound to it there; its ClusterRole grants only
// what lives in every managed cluster's namespace (scores) or is cluster-scoped (clusters).
func TestMCPServerRolePerNamespace(t *testing.T) {
	s := load(t, setHub)
	nss := mcpNamespaces(t, s)
	if !slices.Contains(nss, mcpNamespace) || slices.Contains(nss, mcpElsewhere) {
		t.Fatalf("NAMESPACES %v: these tests need %s listed and %s not", nss, mcpNamespace, mcpElsewhere)
	}
	cr, ok := manifests.Find(s.ClusterRoles, "", "scoreflow-mcp-server")
	if !ok {
		t.Fatal("ClusterRole scoreflow-mcp-server not found")
	}
	for _, r := range cr.Object.Rules {
		for _, res := range r.Resources {
			if res != "managedclusters" && res != "addonplacementscores" {
				t.Errorf("%s grants %v on %s cluster-wide; Placements belong in the Role of each namespace of NAMESPACES", cr.Source, r.Verbs, res)
			}
		}
	}
	for _, ns := range nss {
		if _, ok := manifests.Find(s.Roles, ns, "scoreflow-mcp-server"); !ok {
			t.Errorf("no Role scoreflow-mcp-server in %s, a namespace of NAMESPACES", ns)
		}
		rb, ok := manifests.Find(s.RoleBindings, ns, "scoreflow-mcp-server")
		if !ok || rb.Object.RoleRef.Kind != "Role" || rb.Object.RoleRef.Name != "scoreflow-mcp-server" ||
			len(rb.Object.Subjects) != 1 || rb.Object.Subjects[0].Name != "mcp-server" || rb.Object.Subjects[0].Namespace != Namespace {
			t.Errorf("no RoleBinding of Role scoreflow-mcp-server to scoreflow/mcp-server in %s", ns)
		}
	}
	for _, it := range s.Roles {
		if it.Object.Name == "scoreflow-mcp-server" && !slices.Contains(nss, it.Object.Namespace) {
			t.Errorf("Role scoreflow-mcp-server in %s, which NAMESPACES does not list", it.Object.Namespace)
		}
	}
}

// TestMCPServerUnderRBAC runs the real MCP server as deploy/'s mcp-server account: every read
// tool answers from the hub, and explain_placement refuses a namespace NAMESPACES does not list.
// Then the account is refused every write (it changes the hub only through the optimizer), any
// read of Placements outside NAMESPACES, and what no scoreflow account may do; the two caller
// identities it admits have no API access at all.
func TestMCPServerUnderRBAC(t *testing.T) {
	h := rbacHub(t)
	seedMCP(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := mcpReadTools(ctx, mcpAs(t, h, "mcp-server")); err != nil {
		t.Fatalf("read tools as the mcp-server account: %v", err)
	}
	cfg, kube, cc := as(t, h, Namespace, "mcp-server")
	dyn := dynamic.NewForConfigOrDie(cfg)
	writes := []access{
		{"update a Placement", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			_, err := cc.ClusterV1beta1().Placements(mcpNamespace).Patch(ctx, mcpPlacement, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		}, false},
		{"delete a Placement", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			return cc.ClusterV1beta1().Placements(mcpNamespace).Delete(ctx, mcpPlacement, metav1.DeleteOptions{})
		}, false},
		{"list Placements", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			_, err := cc.ClusterV1beta1().Placements(mcpNamespace).List(ctx, metav1.ListOptions{})
			return err
		}, false},
		{"write PlacementDecisions", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			return cc.ClusterV1beta1().PlacementDecisions(mcpNamespace).Delete(ctx, "x", metav1.DeleteOptions{})
		}, false},
		{"write an AddOnPlacementScore's status", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			_, err := cc.ClusterV1alpha1().AddOnPlacementScores(cluster).Patch(ctx, "opt-score", types.MergePatchType, []byte(`{"status":{"scores":[]}}`), metav1.PatchOptions{}, "status")
			return err
		}, false},
		{"get a Policy", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			_, err := dyn.Resource(optimizer.PolicyResource).Namespace(mcpNamespace).Get(ctx, "mig-2g", metav1.GetOptions{})
			return err
		}, false},
		{"delete a PlacementBinding", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			return dyn.Resource(optimizer.PlacementBindingResource).Namespace(mcpNamespace).Delete(ctx, "x", metav1.DeleteOptions{})
		}, false},
		{"get a Placement outside NAMESPACES", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			_, err := cc.ClusterV1beta1().Placements(mcpElsewhere).Get(ctx, mcpPlacement, metav1.GetOptions{})
			return err
		}, false},
		{"list PlacementDecisions outside NAMESPACES", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			_, err := cc.ClusterV1beta1().PlacementDecisions(mcpElsewhere).List(ctx, metav1.ListOptions{})
			return err
		}, false},
		{"list PlacementDecisions in every namespace", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			_, err := cc.ClusterV1beta1().PlacementDecisions("").List(ctx, metav1.ListOptions{})
			return err
		}, false},
		{"get a Placement in NAMESPACES", func(ctx context.Context, _ kubernetes.Interface, cc clusterclient.Interface) error {
			_, err := cc.ClusterV1beta1().Placements(mcpNamespace).Get(ctx, mcpPlacement, metav1.GetOptions{})
			return err
		}, true},
		{"read a ServiceAccount", func(ctx context.Context, kube kubernetes.Interface, _ clusterclient.Interface) error {
			_, err := kube.CoreV1().ServiceAccounts(Namespace).Get(ctx, "mcp-planner", metav1.GetOptions{})
			return err
		}, false},
		with(true, named(neverAllowed, "list AddOnPlacementScores")),
	}
	checkAccess(t, kube, cc, append(writes, without(neverAllowed, "list AddOnPlacementScores")...))
	for _, caller := range []string{"mcp-reader", "mcp-planner"} {
		_, kube, cc := as(t, h, Namespace, caller)
		checkAccess(t, kube, cc, []access{with(false, getManagedCluster), with(false, listManagedClusters), named(neverAllowed, "list AddOnPlacementScores")})
	}
}

// TestMCPServerNeedsEveryGrant runs the read tools as copies of the deployed ClusterRole and Role
// that each lack one verb on one resource: every copy makes a tool fail (Forbidden), so no grant
// in deploy/mcp-server.yaml is spare.
func TestMCPServerNeedsEveryGrant(t *testing.T) {
	h := rbacHub(t)
	seedMCP(t, h)
	ctx := context.Background()
	s := load(t, setHub)
	deployed, ok := manifests.Find(s.ClusterRoles, "", "scoreflow-mcp-server")
	if !ok {
		t.Fatal("ClusterRole scoreflow-mcp-server not found")
	}
	role, ok := manifests.Find(s.Roles, mcpNamespace, "scoreflow-mcp-server")
	if !ok {
		t.Fatalf("Role scoreflow-mcp-server not found in %s", mcpNamespace)
	}
	check := func(t *testing.T, name, verb, res string) {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		err := mcpReadTools(cctx, mcpAs(t, h, name))
		if err == nil || !strings.Contains(err.Error(), "forbidden") {
			t.Errorf("without %s on %s: %v, want a tool failing with forbidden", verb, res, err)
		}
	}
	n := 0
	for ri, rule := range deployed.Object.Rules {
		for _, res := range rule.Resources {
			for _, verb := range rule.Verbs {
				n++
				name := fmt.Sprintf("test-mcp-without-%s-%s", verb, res)
				t.Run(name, func(t *testing.T) {
					bindToNewAccount(ctx, t, h, withoutGrant(deployed.Object, name, ri, res, verb))
					bindRole(ctx, t, h, name, role.Object.Name) // the deployed Role, whole
					check(t, name, verb, res)
				})
			}
		}
	}
	for ri, rule := range role.Object.Rules {
		for _, res := range rule.Resources {
			for _, verb := range rule.Verbs {
				n++
				name := fmt.Sprintf("test-mcp-ns-without-%s-%s", verb, res)
				t.Run(name, func(t *testing.T) {
					cr := deployed.Object.DeepCopy()
					cr.Name = name
					bindToNewAccount(ctx, t, h, cr) // the deployed ClusterRole, whole
					reduced := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: mcpNamespace},
						Rules: withoutGrant(&rbacv1.ClusterRole{Rules: role.Object.Rules}, name, ri, res, verb).Rules}
					if err := createIgnoreExists(h.Kube.RbacV1().Roles(mcpNamespace).Create(ctx, reduced, metav1.CreateOptions{})); err != nil {
						t.Fatal(err)
					}
					bindRole(ctx, t, h, name, name)
					check(t, name, verb, res)
				})
			}
		}
	}
	if n < 5 {
		t.Errorf("only %d grants checked", n)
	}
}

// named returns the entry of table called name.
func named(table []access, name string) access {
	for _, a := range table {
		if a.name == name {
			return a
		}
	}
	panic("no access entry " + name)
}
