// Command mcp-server serves scoreflow's Model Context Protocol tools (list and summarise scores,
// explain a Placement, optimise, reset a plan) over streamable HTTP at /mcp, for callers with a
// bearer token. See package github.com/scoreflow/scoreflow/pkg/mcpserver.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"

	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/mcpserver"
)

func main() {
	fn := function.New("mcp-server", "Model Context Protocol tools over streamable HTTP at /mcp: scores, Placement explanations, optimisation")
	kubeconfig := fn.Flags.String("kubeconfig", "", "kubeconfig of the hub (empty: in-cluster config); read access is enough")
	optimizerURL := fn.Flags.String("optimizer-url", "http://optimizer.scoreflow.svc.cluster.local", "base URL of the optimizer function (POST /optimize, /reset)")
	optimizerToken := fn.Flags.String("optimizer-token-file", "", "bearer token presented to the optimizer, for an optimizer that verifies callers (a projected ServiceAccount token with its audience; re-read on every call)")
	readToken := fn.Flags.String("read-token-file", "", "file holding a static bearer token that may read (a mounted Secret; re-read on every request)")
	optimizeToken := fn.Flags.String("optimize-token-file", "", "file holding a static bearer token that may also optimise and reset")
	readSubjects := fn.Flags.String("read-subjects", "", "comma-separated identities whose cluster-issued tokens may read: system:serviceaccount:<ns>:<name> or a prefix ending in *")
	optimizeSubjects := fn.Flags.String("optimize-subjects", "", "comma-separated identities whose cluster-issued tokens may also optimise and reset")
	audience := fn.Flags.String("token-audience", "scoreflow-mcp", "the audience a cluster-issued token must carry (kubectl create token --audience)")
	discovery := fn.Flags.String("token-discovery-url", function.DefaultDiscoveryURL, "the API server whose OIDC discovery and keys verify cluster-issued tokens")
	discoveryCA := fn.Flags.String("token-ca-file", function.DefaultCAFile, "CA bundle of that API server (missing file: system roots)")
	discoveryToken := fn.Flags.String("token-discovery-token-file", function.DefaultTokenFile, "token presented when reading discovery and keys (missing file: none, which oidc/discovery.yaml allows)")
	namespaces := fn.Flags.String("namespaces", "", "comma-separated namespaces whose Placements explain_placement reads (required; its account needs a Role in each)")
	idle := fn.Flags.Duration("session-idle-timeout", mcpserver.DefaultSessionIdleTimeout, "close a session after this long without a request")
	maxSessions := fn.Flags.Int("max-sessions", mcpserver.DefaultMaxSessions, "sessions open at once, in all (503 beyond)")
	maxPerCaller := fn.Flags.Int("max-sessions-per-caller", mcpserver.DefaultMaxSessionsPerCaller, "sessions one caller (a subject or a static token) may have open at once (429 beyond)")

	fn.Main(func(ctx context.Context) error {
		reads, optimizes := list(*readSubjects), list(*optimizeSubjects)
		if *readToken == "" && *optimizeToken == "" && len(reads)+len(optimizes) == 0 {
			return errors.New("no caller can be admitted: set --read-subjects/--optimize-subjects and/or --read-token-file/--optimize-token-file; the endpoint is never open")
		}
		nss := list(*namespaces)
		if len(nss) == 0 {
			return errors.New("--namespaces: name the namespaces whose Placements this server may explain")
		}
		var tokens *function.Authenticator
		if len(reads)+len(optimizes) > 0 {
			var err error
			tokens, err = function.NewAuthenticator(function.AuthOptions{Audience: *audience, Subjects: append(append([]string(nil), reads...), optimizes...),
				DiscoveryURL: *discovery, TokenFile: *discoveryToken, CAFile: *discoveryCA})
			if err != nil {
				return err
			}
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			return fmt.Errorf("hub config: %w", err)
		}
		cfg.UserAgent = "scoreflow-mcp-server"
		cc, err := clusterclient.NewForConfig(cfg)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("/mcp", mcpserver.Handler(mcpserver.Config{Cluster: cc, OptimizerURL: *optimizerURL, OptimizerTokenFile: *optimizerToken, ReadTokenFile: *readToken, OptimizeTokenFile: *optimizeToken,
			Tokens: tokens, ReadSubjects: reads, OptimizeSubjects: optimizes, Namespaces: nss,
			SessionIdleTimeout: *idle, MaxSessions: *maxSessions, MaxSessionsPerCaller: *maxPerCaller, Log: fn.Log}))
		return fn.ServeHTTP(ctx, fn.Mux(mux))
	})
}

func list(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
