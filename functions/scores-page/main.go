// Command scores-page serves a live web page at /ui/: the hub's clusters x scores as a heat map
// with their freshness, each Placement's decision over time and the scores and weights behind it,
// and the events its Trigger delivers, refusals with their reasons. It receives CloudEvents at /
// and never replies. See package github.com/scoreflow/scoreflow/pkg/scorespage.
package main

import (
	"context"
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"

	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/scorespage"
)

func main() {
	fn := function.New("scores-page", "a live web page at /ui/: clusters x scores with their freshness, each Placement's decision and why, and the events it receives")
	kubeconfig := fn.Flags.String("kubeconfig", "", "kubeconfig of the hub (empty: in-cluster config); get, list and watch on AddOnPlacementScores, Placements and PlacementDecisions is all it needs")
	events := fn.Flags.Int("events", 200, "how many received events the page keeps and shows, newest first")
	history := fn.Flags.Int("history", 50, "how many decisions per Placement the page keeps for its timeline")

	fn.Main(func(ctx context.Context) error {
		cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			return fmt.Errorf("hub config: %w", err)
		}
		cfg.UserAgent = "scoreflow-scores-page"
		cc, err := clusterclient.NewForConfig(cfg)
		if err != nil {
			return err
		}
		page := scorespage.New(cc, scorespage.Options{Events: *events, History: *history, Log: fn.Log, Registry: fn.Registry})
		fn.SetReadiness(page.Ready)
		go page.Run(ctx)
		return fn.ServeHTTP(ctx, page.Mux(ctx, fn.Handler(page.Handle, nil)))
	})
}
