package mcpserver_test

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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	workclient "open-cluster-management.io/api/client/work/clientset/versioned"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"
	workv1alpha1 "open-cluster-management.io/api/work/v1alpha1"

	"github.com/scoreflow/scoreflow/harness/authtest"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/mcpserver"
	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

const (
	ns          = "mcp"
	elsewhere   = "mcp-elsewhere"
	set         = "mcp-set"
	readToken   = "read-secret-1"
	adminToken  = "optimize-secret-2"
	scoreName   = "demo-performance-score"
	placementNm = "best-app01"
)

// stack is a local hub with the real placement controller, two clusters with scores, a policy
// per cluster and a workload; the optimizer function in process; and the MCP server in front.
func stack(t *testing.T) stackURLs {
	t.Helper()
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	if err := hub.InstallWorkloadCRDs(); err != nil {
		t.Fatal(err)
	}
	pc, err := hub.StartPlacementController(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Stop() })
	ctx := context.Background()
	ok := func(err error) {
		t.Helper()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	ok(hub.AddClusterSet(ctx, set, ns))
	dyn := dynamic.NewForConfigOrDie(hub.Config)
	for i, c := range []string{"cluster1", "cluster2"} {
		ok(hub.AddCluster(ctx, c, map[string]string{localhub.ClusterSetLabel: set}))
		ok(hub.MarkAvailable(ctx, c))
		aps, err := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(c).Create(ctx, &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: scoreName, Namespace: c}}, metav1.CreateOptions{})
		ok(err)
		aps.Status.Scores = []clusterv1alpha1.AddOnPlacementScoreItem{{Name: "app01;3g", Value: int32(40 + 30*i)}}
		_, err = hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(c).UpdateStatus(ctx, aps, metav1.UpdateOptions{})
		ok(err)
		pol := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "policy.open-cluster-management.io/v1", "kind": "Policy",
			"metadata": map[string]any{"name": "mig-3g-" + c, "namespace": ns, "labels": map[string]any{
				optimizer.LabelSupplyKind: "gpu", optimizer.LabelSupplyAmount: "2", optimizer.LabelSupplyDevice: "3g"}},
			"spec": map[string]any{"disabled": false, "policy-templates": []any{}},
		}}
		_, err = dyn.Resource(optimizer.PolicyResource).Namespace(ns).Create(ctx, pol, metav1.CreateOptions{})
		ok(err)
	}
	wk := workclient.NewForConfigOrDie(hub.Config)
	_, err = wk.WorkV1alpha1().ManifestWorkReplicaSets(ns).Create(ctx, &workv1alpha1.ManifestWorkReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "mwrs-app01", Namespace: ns, Labels: map[string]string{optimizer.LabelApp: "app01", optimizer.LabelRequestKind: "gpu", optimizer.LabelRequestAmount: "1"}},
		Spec:       workv1alpha1.ManifestWorkReplicaSetSpec{PlacementRefs: []workv1alpha1.LocalPlacementReference{{Name: "app01-placement"}}},
	}, metav1.CreateOptions{})
	ok(err)
	_, err = hub.Cluster.ClusterV1beta1().Placements(ns).Create(ctx, localhub.ScorePlacement(ns, placementNm, set, scoreName, "app01;3g", 1), metav1.CreateOptions{})
	ok(err)
	// A Placement in a namespace the server is not deployed for.
	ok(hub.AddClusterSet(ctx, set, elsewhere))
	_, err = hub.Cluster.ClusterV1beta1().Placements(elsewhere).Create(ctx, localhub.ScorePlacement(elsewhere, placementNm, set, scoreName, "app01;3g", 1), metav1.CreateOptions{})
	ok(err)

	fn := function.New("optimizer", "test")
	fn.Log = slog.New(slog.NewJSONHandler(io.Discard, nil))
	o := &optimizer.Optimizer{Cluster: hub.Cluster, Work: wk, Dynamic: dyn, Opts: optimizer.Options{TimeLimit: 5 * time.Second, Namespaces: []string{ns}}}
	h := &optimizer.Handler{Optimizer: o, Source: fn.Source(), Log: fn.Log}
	// The optimizer verifies its callers, the JSON API included: only the MCP server's identity.
	optAuth, err := function.NewAuthenticator(authtest.PodFiles(t, hub, optimizerAudience, authtest.Subject(ns, "mcp-server")))
	if err != nil {
		t.Fatal(err)
	}
	fn.RequireAuth(optAuth)
	opt := httptest.NewServer(h.ProtectedMux(fn.Handler(h.Handle, h.FailureReply), fn.Protect))
	t.Cleanup(opt.Close)

	dir := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	authOpts := authtest.PodFiles(t, hub, mcpAudience, authtest.Subject(ns, "reader"), authtest.Subject(ns, "planner"))
	tokens, err := function.NewAuthenticator(authOpts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcpserver.Handler(mcpserver.Config{Cluster: hub.Cluster, OptimizerURL: opt.URL,
		OptimizerTokenFile: write("optimizer", authtest.Token(t, hub.Kube, ns, "mcp-server", optimizerAudience)),
		ReadTokenFile:      write("read", readToken), OptimizeTokenFile: write("optimize", adminToken),
		Tokens: tokens, ReadSubjects: []string{authtest.Subject(ns, "reader")}, OptimizeSubjects: []string{authtest.Subject(ns, "planner")},
		Namespaces: []string{ns}, Log: slog.New(slog.NewJSONHandler(io.Discard, nil))}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return stackURLs{mcp: srv.URL + "/mcp", optimizer: opt.URL, hub: hub}
}

const (
	mcpAudience       = "scoreflow-mcp"
	optimizerAudience = "scoreflow/optimizer"
)

type stackURLs struct {
	mcp, optimizer string
	hub            *localhub.Hub
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func connect(ctx context.Context, url, token string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token}}, MaxRetries: -1}, nil)
}

func call(t *testing.T, cs *mcp.ClientSession, tool string, args any, out any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if out != nil && !res.IsError {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestMCPEndToEnd drives the server with the SDK's own client over streamable HTTP: callers
// without a known bearer token are refused; the read token lists and summarises scores and has a
// Placement's decision explained, but is refused optimising; the optimize token runs an
// optimisation (through the optimizer function, against the hub) and resets its plan.
func TestMCPEndToEnd(t *testing.T) {
	url := stack(t).mcp
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	for _, tok := range []string{"", "guess"} {
		if cs, err := connect(ctx, url, tok); err == nil {
			cs.Close()
			t.Errorf("token %q: connected", tok)
		}
	}

	cs, err := connect(ctx, url, readToken)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, ","); got != "explain_placement,list_scores,optimize,reset_plan,summarize_scores" {
		t.Errorf("tools %s", got)
	}

	var scores mcpserver.ScoresOutput
	call(t, cs, "list_scores", map[string]any{"resource": scoreName}, &scores)
	if len(scores.Items) != 2 || scores.Items[1].Cluster != "cluster2" || scores.Items[1].Scores["app01;3g"] != 70 {
		t.Errorf("list_scores: %+v", scores)
	}
	var sum mcpserver.SummaryOutput
	call(t, cs, "summarize_scores", map[string]any{}, &sum)
	if len(sum.Summaries) != 1 || sum.Summaries[0].BestCluster != "cluster2" || sum.Summaries[0].Min != 40 || sum.Summaries[0].Mean != 55 {
		t.Errorf("summarize_scores: %+v", sum)
	}

	// The placement controller picks cluster2 (70 > 40); the explanation agrees and says why.
	var ex mcpserver.PlacementOutput
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		call(t, cs, "explain_placement", map[string]any{"namespace": ns, "name": placementNm}, &ex)
		if len(ex.Decisions) == 1 || time.Now().After(deadline) {
			break
		}
	}
	if fmt.Sprint(ex.Decisions) != "[cluster2]" || len(ex.Clusters) != 2 || ex.Clusters[0].Cluster != "cluster2" || !ex.Clusters[0].Chosen || ex.Clusters[0].Total != 70 || ex.Clusters[1].Total != 40 {
		t.Errorf("explain_placement: %+v", ex)
	}
	// The same Placement in a namespace the server is not deployed for: refused, nothing read.
	if res := call(t, cs, "explain_placement", map[string]any{"namespace": elsewhere, "name": placementNm}, nil); !res.IsError ||
		!strings.Contains(text(res), `refused: this server reads Placements only in [mcp] (its --namespaces), not in "mcp-elsewhere"`) {
		t.Errorf("explain_placement in %s: error %v, %q", elsewhere, res.IsError, text(res))
	}

	params := optimizer.Params{Namespace: ns,
		Clusters: []optimizer.Cluster{
			{Name: "cluster1", AvailablePolicies: []optimizer.Named{{Name: "mig-3g-cluster1"}}},
			{Name: "cluster2", AvailablePolicies: []optimizer.Named{{Name: "mig-3g-cluster2"}}},
		},
		TargetWorkloads: []optimizer.Named{{Name: "mwrs-app01"}},
		Preference:      optimizer.Preference{AddonPlacementScore: scoreName}}
	res := call(t, cs, "optimize", map[string]any{"params": params}, nil)
	if !res.IsError || !strings.Contains(text(res), "refused") {
		t.Errorf("optimize with the read token: error %v, %q", res.IsError, text(res))
	}

	admin, err := connect(ctx, url, adminToken)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var plan optimizer.Plan
	if res := call(t, admin, "optimize", map[string]any{"params": params}, &plan); res.IsError {
		t.Fatalf("optimize: %s", text(res))
	}
	if plan.Objective != 70 || len(plan.Workloads) != 1 || plan.Workloads[0].Cluster != "cluster2" || len(plan.Placements) != 3 {
		t.Errorf("plan %+v", plan)
	}
	var reset optimizer.ResetResult
	if res := call(t, admin, "reset_plan", map[string]any{"namespace": ns, "plan": plan.ID}, &reset); res.IsError {
		t.Fatalf("reset_plan: %s", text(res))
	}
	if len(reset.Removed) != 5 {
		t.Errorf("reset removed %v, want 3 Placements and 2 bindings", reset.Removed)
	}
	// A refusal from the optimizer comes back as a tool error naming its reason.
	params.TargetWorkloads[0].Name = "nope"
	if res := call(t, admin, "optimize", map[string]any{"params": params}, nil); !res.IsError || !strings.Contains(text(res), "UnknownObject") {
		t.Errorf("optimize of an unknown workload: %v %q", res.IsError, text(res))
	}
}

// TestMCPClusterIssuedTokens drives the server with the SDK's client and tokens the real hub
// issues: without a valid token for the server's audience the connection is refused (401) and an
// identity in neither list gets 403 naming it; the reader's token reads but is refused optimising,
// with the reason; the planner's token optimises and resets.
func TestMCPClusterIssuedTokens(t *testing.T) {
	st := stack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reader := authtest.Token(t, st.hub.Kube, ns, "reader", mcpAudience)
	planner := authtest.Token(t, st.hub.Kube, ns, "planner", mcpAudience)

	for _, c := range []struct {
		name, token string
		status      int
		says        string
	}{
		{"other audience", authtest.Token(t, st.hub.Kube, ns, "planner", "scoreflow/optimizer"), 401, "Unauthenticated"},
		// Signed by a key the cluster never had, under the id of one it has. (One naming an
		// unknown key id is answered 503 until the keys may be read again: pkg/function.)
		{"forged", authtest.Forge(t, planner, true), 401, "Unauthenticated"},
		{"other identity", authtest.Token(t, st.hub.Kube, ns, "intruder", mcpAudience), 403, "NotAllowed: caller system:serviceaccount:mcp:intruder"},
	} {
		if cs, err := connect(ctx, st.mcp, c.token); err == nil {
			cs.Close()
			t.Errorf("%s: connected", c.name)
		}
		req, _ := http.NewRequest(http.MethodPost, st.mcp, strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(body), c.says) {
			t.Errorf("%s: %d %q, want %d saying %q", c.name, resp.StatusCode, body, c.status, c.says)
		}
	}

	// The optimizer's JSON API, which the MCP server calls with its own token, is closed to
	// everyone else: no token 401, another identity 403.
	for _, c := range []struct {
		token  string
		status int
	}{{"", 401}, {authtest.Token(t, st.hub.Kube, ns, "planner", optimizerAudience), 403}} {
		req, _ := http.NewRequest(http.MethodPost, st.optimizer+"/reset", strings.NewReader(`{"namespace":"`+ns+`"}`))
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("POST /reset on the optimizer with token %.10q: %d, want %d", c.token, resp.StatusCode, c.status)
		}
	}

	cs, err := connect(ctx, st.mcp, reader)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	var scores mcpserver.ScoresOutput
	call(t, cs, "list_scores", map[string]any{"resource": scoreName}, &scores)
	if len(scores.Items) != 2 {
		t.Errorf("list_scores with the reader's token: %+v", scores)
	}
	params := optimizer.Params{Namespace: ns,
		Clusters: []optimizer.Cluster{
			{Name: "cluster1", AvailablePolicies: []optimizer.Named{{Name: "mig-3g-cluster1"}}},
			{Name: "cluster2", AvailablePolicies: []optimizer.Named{{Name: "mig-3g-cluster2"}}},
		},
		TargetWorkloads: []optimizer.Named{{Name: "mwrs-app01"}},
		Preference:      optimizer.Preference{AddonPlacementScore: scoreName}}
	for _, tool := range []string{"optimize", "reset_plan"} {
		args := map[string]any{"params": params}
		if tool == "reset_plan" {
			args = map[string]any{"namespace": ns}
		}
		res := call(t, cs, tool, args, nil)
		if !res.IsError || !strings.Contains(text(res), "refused: system:serviceaccount:mcp:reader may read scores but not change the hub") {
			t.Errorf("%s with the reader's token: error %v, %q", tool, res.IsError, text(res))
		}
	}
	if ps, err := st.hub.Cluster.ClusterV1beta1().Placements(ns).List(ctx, metav1.ListOptions{LabelSelector: "optimizer.scoreflow.io/generated=true"}); err != nil || len(ps.Items) != 0 {
		t.Fatalf("the reader's calls wrote %d Placements (%v)", len(ps.Items), err)
	}

	pc, err := connect(ctx, st.mcp, planner)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var plan optimizer.Plan
	if res := call(t, pc, "optimize", map[string]any{"params": params}, &plan); res.IsError {
		t.Fatalf("optimize with the planner's token: %s", text(res))
	}
	if plan.Workloads[0].Cluster != "cluster2" {
		t.Errorf("plan %+v", plan)
	}
	var reset optimizer.ResetResult
	if res := call(t, pc, "reset_plan", map[string]any{"namespace": ns, "plan": plan.ID}, &reset); res.IsError || len(reset.Removed) != 5 {
		t.Errorf("reset_plan with the planner's token: %s %v", text(res), reset.Removed)
	}
}
