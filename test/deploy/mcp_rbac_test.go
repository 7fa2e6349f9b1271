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
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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
)

// seedMCP adds to the optimizer's seed a Placement whose AddOn prioritizer names the seeded score,
// for explain_placement.
func seedMCP(t *testing.T, h *localhub.Hub) {
	t.Helper()
	seedOptimizer(t, h)
	_, err := h.Cluster.ClusterV1beta1().Placements(mcpNamespace).Create(context.Background(),
		localhub.ScorePlacement(mcpNamespace, mcpPlacement, "default", "opt-score", "app01;2g", 1), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// mcpAs serves the real MCP server reading the hub as ServiceAccount scoreflow/sa and returns its
// /mcp URL (a static read token admits the test's client).
func mcpAs(t *testing.T, h *localhub.Hub, sa string) string {
	t.Helper()
	_, _, cc := as(t, h, Namespace, sa)
	tok := filepath.Join(t.TempDir(), "read")
	if err := os.WriteFile(tok, []byte(mcpToken), 0o600); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcpserver.Handler(mcpserver.Config{Cluster: cc, OptimizerURL: "http://127.0.0.1:1", ReadTokenFile: tok,
		Log: slog.New(slog.NewJSONHandler(io.Discard, nil))}))
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
// score (42 for app01;2g on cluster1); it returns the first tool error or wrong answer.
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

// TestMCPServerUnderRBAC runs the real MCP server as deploy/'s mcp-server account: every read
// tool answers from the hub. Then the account is refused every write (it changes the hub only
// through the optimizer) and what no scoreflow account may do; the two caller identities it admits
// have no API access at all.
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

// TestMCPServerNeedsEveryGrant runs the read tools as copies of the deployed ClusterRole that each
// lack one verb on one resource: every copy makes a tool fail (Forbidden), so no grant in
// deploy/mcp-server.yaml is spare.
func TestMCPServerNeedsEveryGrant(t *testing.T) {
	h := rbacHub(t)
	seedMCP(t, h)
	ctx := context.Background()
	deployed, ok := manifests.Find(load(t, setHub).ClusterRoles, "", "scoreflow-mcp-server")
	if !ok {
		t.Fatal("ClusterRole scoreflow-mcp-server not found")
	}
	n := 0
	for ri, rule := range deployed.Object.Rules {
		for _, res := range rule.Resources {
			for _, verb := range rule.Verbs {
				n++
				name := fmt.Sprintf("test-mcp-without-%s-%s", verb, res)
				t.Run(name, func(t *testing.T) {
					role := withoutGrant(deployed.Object, name, ri, res, verb)
					bindToNewAccount(ctx, t, h, role)
					cctx, cancel := context.WithTimeout(ctx, time.Minute)
					defer cancel()
					err := mcpReadTools(cctx, mcpAs(t, h, name))
					if err == nil || !strings.Contains(err.Error(), "forbidden") {
						t.Errorf("without %s on %s: %v, want a tool failing with forbidden", verb, res, err)
					}
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
