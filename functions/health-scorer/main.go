// Command health-scorer scores managed clusters' health for disaster-recovery placement: from
// ApiServerSource events about ManagedClusters (mode Resource), answering each with one
// score.updated for that cluster, and on each PingSource event from its informer's cache of every
// ManagedCluster on the hub, answering with one score.updated for all of them. See package
// github.com/scoreflow/scoreflow/pkg/scorer/health for the scoring table.
package main

import (
	"context"
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"

	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/scorer"
	"github.com/scoreflow/scoreflow/pkg/scorer/health"
)

func main() {
	fn := function.New("health-scorer", "scores ManagedCluster health (available, joined, accepted, lease freshness) from ApiServerSource add/update events, and of every ManagedCluster on each PingSource event; deleted clusters get no score")
	s := &health.Scorer{Log: fn.Log}
	fn.Flags.StringVar(&s.Resource, "resource", "cluster-health", "AddOnPlacementScore name the health score is written to")
	fn.Flags.StringVar(&s.ScoreName, "score-name", "health", "score item name within the resource")
	fn.Flags.DurationVar(&s.ValidFor, "valid-for", health.DefaultValidFor, "validUntil of each score, counted from its evaluation; pings renew it, so keep it a few schedule intervals; 0: until the next score")
	kubeconfig := fn.Flags.String("kubeconfig", "", "kubeconfig of the hub, for watching ManagedClusters (empty: in-cluster config)")

	// A result too large for one event sends all but its reply here (pkg/scorer).
	newSink := fn.OptionalSinkFlags()
	split := scorer.Flags(fn.Flags)
	fn.Main(func(ctx context.Context) error {
		sink, err := newSink()
		if err != nil {
			return err
		}
		s.Log = fn.Log // Parse replaced the logger with one at --log-level
		if err := s.Validate(); err != nil {
			return err
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			return fmt.Errorf("hub config: %w", err)
		}
		cfg.UserAgent = "scoreflow-health-scorer"
		client, err := clusterclient.NewForConfig(cfg)
		if err != nil {
			return err
		}
		// Not a readiness condition: ApiServerSource events need no cache, and a ping before the
		// first list is answered 503 (or 400 Forbidden, naming the grant, if it was refused).
		s.Clusters = health.WatchClusters(ctx, client, fn.Log)
		return fn.Serve(ctx, scorer.HandlerWith(fn.Source(), s.Routes(), sink, *split), nil)
	})
}
