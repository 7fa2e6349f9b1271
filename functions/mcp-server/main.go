// Command mcp-server serves scoreflow's Model Context Protocol tools (list and summarise scores,
// explain a Placement, optimise, reset a plan) over streamable HTTP at /mcp, for callers with a
// bearer token. See package github.com/scoreflow/scoreflow/pkg/mcpserver.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"k8s.io/client-go/tools/clientcmd"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"

	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/mcpserver"
)

func main() {
	fn := function.New("mcp-server", "Model Context Protocol tools over streamable HTTP at /mcp: scores, Placement explanations, optimisation")
	kubeconfig := fn.Flags.String("kubeconfig", "", "kubeconfig of the hub (empty: in-cluster config); read access is enough")
	optimizerURL := fn.Flags.String("optimizer-url", "http://optimizer.scoreflow.svc.cluster.local", "base URL of the optimizer function (POST /optimize, /reset)")
	readToken := fn.Flags.String("read-token-file", "", "file holding the bearer token that may read (a mounted Secret; re-read on every request)")
	optimizeToken := fn.Flags.String("optimize-token-file", "", "file holding the bearer token that may also optimise and reset")

	fn.Main(func(ctx context.Context) error {
		if *readToken == "" && *optimizeToken == "" {
			return errors.New("no token file: set --read-token-file and/or --optimize-token-file; the endpoint is never open")
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
		mux.Handle("/mcp", mcpserver.Handler(mcpserver.Config{Cluster: cc, OptimizerURL: *optimizerURL, ReadTokenFile: *readToken, OptimizeTokenFile: *optimizeToken}))
		return fn.ServeHTTP(ctx, fn.Mux(mux))
	})
}
