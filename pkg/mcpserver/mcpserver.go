// Package mcpserver is scoreflow's Model Context Protocol server (the official Go SDK, streamable
// HTTP): an assistant can list and summarise AddOnPlacementScores, have a Placement's decision
// explained from its scores and weights, run an optimisation and reset a plan. Reading needs the
// read scope; changing the hub (optimise, reset) needs the optimize scope. Callers present a
// mounted static token or a token the cluster issued, whose subject decides. Optimisations are
// delegated to the optimizer function over its JSON API, so only the optimizer writes the hub.
// Placements are read only in the deployment's namespaces (Config.Namespaces); sessions are
// bounded per caller and in all, and closed when idle (sessionBounds).
package mcpserver

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"

	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

// Scopes a token grants.
const (
	ScopeRead     = "scores:read"
	ScopeOptimize = "plans:write"
)

// Config is what the server needs.
type Config struct {
	Cluster clusterclient.Interface
	// OptimizerURL is the optimizer function's base URL (POST /optimize, /reset).
	OptimizerURL string
	// OptimizerTokenFile holds a bearer token the server presents to the optimizer (a projected
	// ServiceAccount token with the optimizer's audience, where the optimizer verifies callers);
	// re-read on every call, as the kubelet renews it in place. Empty or missing: none (an
	// optimizer that verifies callers then answers 401, which the tool reports).
	OptimizerTokenFile string
	HTTP               *http.Client
	// ReadTokenFile and OptimizeTokenFile hold the bearer tokens (mounted Secrets), re-read on
	// every request so a rotated Secret takes effect without a restart. Empty: no such token.
	ReadTokenFile, OptimizeTokenFile string
	// Tokens verifies bearer tokens the cluster issued (a ServiceAccount's, from `kubectl create
	// token --audience`) for the server's audience; nil: none are accepted. Whether a verified
	// caller may read or also optimise is decided by its subject: OptimizeSubjects may do both,
	// ReadSubjects only read ("system:serviceaccount:<ns>:<name>", or a prefix ending in "*").
	Tokens                         *function.Authenticator
	ReadSubjects, OptimizeSubjects []string
	// Namespaces are those whose Placements explain_placement reads (the deployment's, each with
	// a Role granting it); a Placement elsewhere is refused before anything is read.
	Namespaces []string
	// SessionIdleTimeout closes a session after this long without a request; MaxSessions and
	// MaxSessionsPerCaller bound the sessions open at once, in all and per caller (a subject, or
	// a static token). Zero: the Default of each.
	SessionIdleTimeout                time.Duration
	MaxSessions, MaxSessionsPerCaller int
	Now                               func() time.Time
	Log                               *slog.Logger
}

// Handler is /mcp: bearer-token authentication in front of the streamable HTTP transport.
func Handler(cfg Config) http.Handler {
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 90 * time.Second}
	}
	if cfg.OptimizerTokenFile != "" {
		c := *cfg.HTTP
		c.Transport = function.BearerFromFile(cfg.OptimizerTokenFile, c.Transport)
		cfg.HTTP = &c
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.SessionIdleTimeout <= 0 {
		cfg.SessionIdleTimeout = DefaultSessionIdleTimeout
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.MaxSessionsPerCaller <= 0 {
		cfg.MaxSessionsPerCaller = DefaultMaxSessionsPerCaller
	}
	s := NewServer(cfg)
	h := newSessionBounds(s, cfg).wrap(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{SessionTimeout: cfg.SessionIdleTimeout}))
	// The SDK's middleware hands the caller's scopes to the tools; the caller was verified just
	// before (authenticate), which answers refusals with their own status and reason.
	fromContext := func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		if ti, ok := ctx.Value(callerKey{}).(*auth.TokenInfo); ok {
			return ti, nil
		}
		return nil, fmt.Errorf("%w: not verified", auth.ErrInvalidToken)
	}
	return cfg.authenticate(auth.RequireBearerToken(fromContext, &auth.RequireBearerTokenOptions{Scopes: []string{ScopeRead}})(h))
}

type callerKey struct{}

// refused is why a caller is not admitted; its message is answered and logged.
type refused struct {
	status  int
	message string
}

func (r *refused) Error() string { return r.message }

// authenticate admits callers with a token verify accepts; others get 401 (no or no valid
// token), 403 (a valid token of an identity not allowed here) or 503 (the cluster's keys cannot be
// read), with the reason in the body and a log line.
func (cfg Config) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ti, err := cfg.verify(r.Context(), r.Header.Get("Authorization"))
		if err != nil {
			var ref *refused
			if !errors.As(err, &ref) {
				ref = &refused{http.StatusUnauthorized, err.Error()}
			}
			cfg.Log.Warn("caller refused", "status", ref.status, "message", ref.message, "remote", r.RemoteAddr)
			if ref.status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			}
			http.Error(w, ref.message, ref.status)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, ti)))
	})
}

// verify accepts the optimize token (both scopes), the read token (read only), or a token the
// cluster issued for the server's audience to a subject in OptimizeSubjects (both scopes) or
// ReadSubjects (read only).
func (cfg Config) verify(ctx context.Context, header string) (*auth.TokenInfo, error) {
	scheme, token, _ := strings.Cut(header, " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, &refused{http.StatusUnauthorized, "Unauthenticated: no bearer token"}
	}
	exp := cfg.Now().Add(time.Hour) // the mounted tokens do not expire by themselves; rotating the Secret ends them
	if matches(cfg.OptimizeTokenFile, token) {
		return &auth.TokenInfo{Scopes: []string{ScopeRead, ScopeOptimize}, Expiration: exp, UserID: "optimize-token"}, nil
	}
	if matches(cfg.ReadTokenFile, token) {
		return &auth.TokenInfo{Scopes: []string{ScopeRead}, Expiration: exp, UserID: "read-token"}, nil
	}
	if cfg.Tokens == nil {
		return nil, &refused{http.StatusUnauthorized, "Unauthenticated: not a token this server knows"}
	}
	sub, err := cfg.Tokens.Subject(ctx, token)
	switch {
	case errors.Is(err, function.ErrKeysUnavailable):
		cfg.Log.Error("verifying a token", "err", err)
		return nil, &refused{http.StatusServiceUnavailable, "Unavailable: cannot read the cluster's token keys"}
	case err != nil:
		return nil, &refused{http.StatusUnauthorized, "Unauthenticated: " + clip(err.Error(), 300)}
	}
	// Every request is verified again and the verifier checks the token's expiry, so a session
	// outlives no token; exp only answers the SDK's own expiry check.
	switch {
	case function.MatchSubject(cfg.OptimizeSubjects, sub):
		return &auth.TokenInfo{Scopes: []string{ScopeRead, ScopeOptimize}, Expiration: exp, UserID: sub}, nil
	case function.MatchSubject(cfg.ReadSubjects, sub):
		return &auth.TokenInfo{Scopes: []string{ScopeRead}, Expiration: exp, UserID: sub}, nil
	}
	return nil, &refused{http.StatusForbidden, "NotAllowed: caller " + clip(sub, 200) + " is not allowed to use this server"}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func matches(file, token string) bool {
	if file == "" || token == "" {
		return false
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	want := strings.TrimSpace(string(b))
	return want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(token)) == 1
}

func mayOptimize(req *mcp.CallToolRequest) error {
	if req.Extra != nil && req.Extra.TokenInfo != nil {
		for _, s := range req.Extra.TokenInfo.Scopes {
			if s == ScopeOptimize {
				return nil
			}
		}
	}
	who := "this caller"
	if req.Extra != nil && req.Extra.TokenInfo != nil {
		who = req.Extra.TokenInfo.UserID
	}
	return fmt.Errorf("refused: %s may read scores but not change the hub; optimise and reset need a subject in --optimize-subjects (or the optimize token)", who)
}

// Inputs of the tools.
type (
	ScoresInput struct {
		Resource string `json:"resource,omitempty" jsonschema:"only this AddOnPlacementScore name (empty: all)"`
	}
	PlacementInput struct {
		Namespace string `json:"namespace" jsonschema:"the Placement's namespace"`
		Name      string `json:"name" jsonschema:"the Placement's name"`
	}
	OptimizeInput struct {
		Params optimizer.Params `json:"params" jsonschema:"the optimisation request: namespace, clusters with availablePolicies, targetWorkloads, preference"`
	}
	ResetInput struct {
		Namespace string `json:"namespace" jsonschema:"namespace of the generated objects"`
		Plan      string `json:"plan,omitempty" jsonschema:"only this plan's objects (empty: every plan's)"`
	}
)

// Score rows and summaries the tools return.
type (
	ScoreRow struct {
		Cluster    string           `json:"cluster"`
		Resource   string           `json:"resource"`
		ValidUntil *time.Time       `json:"validUntil,omitempty"`
		Expired    bool             `json:"expired"`
		Scores     map[string]int32 `json:"scores"`
	}
	ScoresOutput struct {
		Items []ScoreRow `json:"items"`
	}
	ScoreSummary struct {
		Resource    string  `json:"resource"`
		Score       string  `json:"score"`
		Clusters    int     `json:"clusters"`
		Min         int32   `json:"min"`
		Max         int32   `json:"max"`
		Mean        float64 `json:"mean"`
		BestCluster string  `json:"bestCluster"`
		Expired     int     `json:"expiredClusters"`
	}
	SummaryOutput struct {
		Summaries []ScoreSummary `json:"summaries"`
	}
	ClusterExplanation struct {
		Cluster string             `json:"cluster"`
		Chosen  bool               `json:"chosen"`
		Total   float64            `json:"total"`
		Terms   map[string]float64 `json:"terms"` // "resource/score" -> weight × score
	}
	PlacementOutput struct {
		Placement string               `json:"placement"`
		Mode      string               `json:"mode"`
		Decisions []string             `json:"decisions"`
		Clusters  []ClusterExplanation `json:"clusters"`
		Notes     []string             `json:"notes,omitempty"`
	}
)

// NewServer builds the MCP server and its tools.
func NewServer(cfg Config) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "scoreflow", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "list_scores", Description: "List AddOnPlacementScores per cluster: scores, validUntil and whether expired."}, cfg.listScores)
	mcp.AddTool(s, &mcp.Tool{Name: "summarize_scores", Description: "Summarise AddOnPlacementScores per resource and score name: clusters, min, max, mean, best cluster, expired."}, cfg.summarize)
	mcp.AddTool(s, &mcp.Tool{Name: "explain_placement", Description: "Explain a Placement's decision: per cluster, each AddOn prioritizer's weight × score and the total."}, cfg.explain)
	mcp.AddTool(s, &mcp.Tool{Name: "optimize", Description: "Run an optimisation (choose a policy per cluster and a cluster per workload) and apply its plan. Needs the optimize token."}, cfg.optimize)
	mcp.AddTool(s, &mcp.Tool{Name: "reset_plan", Description: "Remove the Placements and PlacementBindings of generated plans. Needs the optimize token."}, cfg.reset)
	return s
}

func (cfg Config) rows(ctx context.Context, resource string) ([]ScoreRow, error) {
	l, err := cfg.Cluster.ClusterV1alpha1().AddOnPlacementScores("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []ScoreRow
	for _, a := range l.Items {
		if resource != "" && a.Name != resource {
			continue
		}
		r := ScoreRow{Cluster: a.Namespace, Resource: a.Name, Scores: map[string]int32{}}
		if a.Status.ValidUntil != nil {
			t := a.Status.ValidUntil.Time
			r.ValidUntil, r.Expired = &t, t.Before(cfg.Now())
		}
		for _, s := range a.Status.Scores {
			r.Scores[s.Name] = s.Value
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Resource != out[j].Resource {
			return out[i].Resource < out[j].Resource
		}
		return out[i].Cluster < out[j].Cluster
	})
	return out, nil
}

func (cfg Config) listScores(ctx context.Context, _ *mcp.CallToolRequest, in ScoresInput) (*mcp.CallToolResult, ScoresOutput, error) {
	rows, err := cfg.rows(ctx, in.Resource)
	return nil, ScoresOutput{Items: rows}, err
}

func (cfg Config) summarize(ctx context.Context, _ *mcp.CallToolRequest, in ScoresInput) (*mcp.CallToolResult, SummaryOutput, error) {
	rows, err := cfg.rows(ctx, in.Resource)
	if err != nil {
		return nil, SummaryOutput{}, err
	}
	by := map[[2]string]*ScoreSummary{}
	sums := map[[2]string]float64{}
	for _, r := range rows {
		for name, v := range r.Scores {
			k := [2]string{r.Resource, name}
			s := by[k]
			if s == nil {
				s = &ScoreSummary{Resource: r.Resource, Score: name, Min: math.MaxInt32, Max: math.MinInt32}
				by[k] = s
			}
			s.Clusters++
			sums[k] += float64(v)
			if r.Expired {
				s.Expired++
			}
			s.Min = min(s.Min, v)
			if v > s.Max || s.BestCluster == "" {
				s.Max, s.BestCluster = max(s.Max, v), r.Cluster
			}
		}
	}
	var out SummaryOutput
	for k, s := range by {
		s.Mean = sums[k] / float64(s.Clusters)
		out.Summaries = append(out.Summaries, *s)
	}
	sort.Slice(out.Summaries, func(i, j int) bool {
		a, b := out.Summaries[i], out.Summaries[j]
		return a.Resource+"/"+a.Score < b.Resource+"/"+b.Score
	})
	return nil, out, nil
}

func (cfg Config) explain(ctx context.Context, _ *mcp.CallToolRequest, in PlacementInput) (*mcp.CallToolResult, PlacementOutput, error) {
	if !slices.Contains(cfg.Namespaces, in.Namespace) {
		return nil, PlacementOutput{}, fmt.Errorf("refused: this server reads Placements only in %v (its --namespaces), not in %q", cfg.Namespaces, clip(in.Namespace, 63))
	}
	p, err := cfg.Cluster.ClusterV1beta1().Placements(in.Namespace).Get(ctx, in.Name, metav1.GetOptions{})
	if err != nil {
		return nil, PlacementOutput{}, err
	}
	out := PlacementOutput{Placement: in.Namespace + "/" + in.Name, Mode: string(p.Spec.PrioritizerPolicy.Mode)}
	ds, err := cfg.Cluster.ClusterV1beta1().PlacementDecisions(in.Namespace).List(ctx, metav1.ListOptions{LabelSelector: clusterv1beta1.PlacementLabel + "=" + in.Name})
	if err != nil {
		return nil, out, err
	}
	chosen := map[string]bool{}
	for _, d := range ds.Items {
		for _, c := range d.Status.Decisions {
			out.Decisions = append(out.Decisions, c.ClusterName)
			chosen[c.ClusterName] = true
		}
	}
	sort.Strings(out.Decisions)
	mcs, err := cfg.Cluster.ClusterV1().ManagedClusters().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, out, err
	}
	for _, mc := range mcs.Items {
		e := ClusterExplanation{Cluster: mc.Name, Chosen: chosen[mc.Name], Terms: map[string]float64{}}
		for _, pc := range p.Spec.PrioritizerPolicy.Configurations {
			sc := pc.ScoreCoordinate
			if sc == nil || sc.Type != clusterv1beta1.ScoreCoordinateTypeAddOn || sc.AddOn == nil {
				continue
			}
			key := sc.AddOn.ResourceName + "/" + sc.AddOn.ScoreName
			// As the placement controller does: a missing object or score, or an expired one,
			// counts as 0.
			// Any other error (Forbidden, unavailable) fails the explanation rather than
			// silently explaining a score of 0.
			v := 0.0
			a, err := cfg.Cluster.ClusterV1alpha1().AddOnPlacementScores(mc.Name).Get(ctx, sc.AddOn.ResourceName, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return nil, out, err
			}
			if err == nil {
				if a.Status.ValidUntil == nil || !a.Status.ValidUntil.Time.Before(cfg.Now()) {
					for _, s := range a.Status.Scores {
						if s.Name == sc.AddOn.ScoreName {
							v = float64(s.Value)
						}
					}
				}
			}
			e.Terms[key] = float64(pc.Weight) * v
			e.Total += e.Terms[key]
		}
		out.Clusters = append(out.Clusters, e)
	}
	sort.Slice(out.Clusters, func(i, j int) bool { return out.Clusters[i].Total > out.Clusters[j].Total })
	out.Notes = append(out.Notes, "AddOn scores are raw here; the placement controller weighs them the same way (weight × score, missing or expired = 0). BuiltIn prioritizers and predicates are not scored here.")
	return nil, out, nil
}

func (cfg Config) post(ctx context.Context, path string, body any, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(cfg.OptimizerURL, "/")+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := cfg.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("optimizer unreachable: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var f optimizer.Failure
		if json.Unmarshal(raw, &f) == nil && f.Reason != "" {
			return fmt.Errorf("optimizer refused (%d %s): %s", resp.StatusCode, f.Reason, f.Message)
		}
		return fmt.Errorf("optimizer answered %d: %s", resp.StatusCode, clip(strings.TrimSpace(string(raw)), 200))
	}
	return json.Unmarshal(raw, out)
}

func (cfg Config) optimize(ctx context.Context, req *mcp.CallToolRequest, in OptimizeInput) (*mcp.CallToolResult, *optimizer.Plan, error) {
	if err := mayOptimize(req); err != nil {
		return nil, nil, err
	}
	var plan optimizer.Plan
	if err := cfg.post(ctx, "/optimize", in.Params, &plan); err != nil {
		return nil, nil, err
	}
	return nil, &plan, nil
}

func (cfg Config) reset(ctx context.Context, req *mcp.CallToolRequest, in ResetInput) (*mcp.CallToolResult, *optimizer.ResetResult, error) {
	if err := mayOptimize(req); err != nil {
		return nil, nil, err
	}
	var res optimizer.ResetResult
	if err := cfg.post(ctx, "/reset", optimizer.ResetRequest{Namespace: in.Namespace, Plan: in.Plan}, &res); err != nil {
		return nil, nil, err
	}
	return nil, &res, nil
}
