package oidc

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/harness/authtest"
	"github.com/scoreflow/scoreflow/harness/devrun"
	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

// The audiences of the MCP server's callers and of the optimizer, as deploy/ and oidc/ name them.
const (
	mcpAudience       = "scoreflow-mcp"
	optimizerAudience = "scoreflow/optimizer"
)

// checkMCPOptimizes: with sender identity on, an assistant's optimise call through the MCP server
// reaches the optimizer, which verifies the MCP server's own token (its projected ServiceAccount
// token for the optimizer's audience) and writes the plan; reset_plan removes it again. The
// optimizer's JSON API refuses the same request from another identity (403) and without a token
// (401).
func checkMCPOptimizes(t *testing.T, ctx context.Context, s *devrun.Stack) {
	t.Helper()
	// Preferences of app01 on gpu0, written as an admin: this is about who may call, not scoring.
	const resource = "mcp-oidc-preference"
	for c, v := range map[string]int32{"cluster1": 90, "cluster2": 60} {
		aps, err := s.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(c).Create(ctx, &clusterv1alpha1.AddOnPlacementScore{
			ObjectMeta: metav1.ObjectMeta{Name: resource, Namespace: c}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		aps.Status.Scores = []clusterv1alpha1.AddOnPlacementScoreItem{{Name: "app01;gpu0", Value: v}}
		if _, err := s.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(c).UpdateStatus(ctx, aps, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	params := devrun.DemoOptimizeRequest(resource)

	// A planner (deploy/mcp-server.yaml's OPTIMIZE_SUBJECTS) with a token for the MCP server.
	planner := authtest.Token(t, s.Hub.Kube, devrun.Namespace, "mcp-planner", mcpAudience)
	c := mcp.NewClient(&mcp.Implementation{Name: "test-oidc", Version: "v1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.Functions["mcp-server"].URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer(planner)}, MaxRetries: -1}, nil)
	if err != nil {
		t.Errorf("the planner cannot connect to the MCP server: %v", err)
		return
	}
	defer cs.Close()
	var plan optimizer.Plan
	if res := callTool(t, ctx, cs, "optimize", map[string]any{"params": params}, &plan); res != "" {
		t.Errorf("MCP optimize with sender identity on: %s", res)
	} else if len(plan.Workloads) != 1 || plan.Workloads[0].Cluster != "cluster1" || plan.Objective != 90 || len(plan.Placements) == 0 {
		t.Errorf("MCP optimize: plan %+v, want app01 on cluster1 with objective 90", plan)
	} else {
		t.Logf("an optimise call through the MCP server wrote plan %s (%d Placements)", plan.ID, len(plan.Placements))
		var reset optimizer.ResetResult
		if res := callTool(t, ctx, cs, "reset_plan", map[string]any{"namespace": devrun.Namespace, "plan": plan.ID}, &reset); res != "" {
			t.Errorf("MCP reset_plan with sender identity on: %s", res)
		} else if len(reset.Removed) == 0 {
			t.Errorf("MCP reset_plan removed nothing of plan %s", plan.ID)
		}
	}

	// The same request straight to the optimizer: another identity with the right audience, and
	// no token at all.
	body, _ := json.Marshal(params)
	for _, c := range []struct {
		name, token string
		status      int
	}{
		{"an identity that is neither its Trigger nor the MCP server", authtest.Token(t, s.Hub.Kube, devrun.Namespace, "mcp-planner", optimizerAudience), http.StatusForbidden},
		{"no token", "", http.StatusUnauthorized},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.Functions["optimizer"].URL+"/optimize", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("POST /optimize to the optimizer from %s: %d, want %d", c.name, resp.StatusCode, c.status)
		}
	}
}

type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// callTool calls an MCP tool and decodes its structured result into out; it returns the error the
// call or the tool reported, empty when it succeeded.
func callTool(t *testing.T, ctx context.Context, cs *mcp.ClientSession, tool string, args, out any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return err.Error()
	}
	if res.IsError {
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return "the tool failed: " + b.String()
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return ""
}
