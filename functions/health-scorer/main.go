// Command health-scorer scores managed clusters' health for disaster-recovery placement from
// ApiServerSource events about ManagedClusters (mode Resource), answering each with one
// score.updated for that cluster. See package github.com/scoreflow/scoreflow/pkg/scorers/health
// for the scoring table.
package main

import (
	"context"

	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/scorer"
	"github.com/scoreflow/scoreflow/pkg/scorers/health"
)

func main() {
	fn := function.New("health-scorer", "scores ManagedCluster health (available, joined, accepted, lease freshness; deleted -100) from ApiServerSource add/update/delete events")
	s := &health.Scorer{Log: fn.Log}
	fn.Flags.StringVar(&s.Resource, "resource", "cluster-health", "AddOnPlacementScore name the health score is written to")
	fn.Flags.StringVar(&s.ScoreName, "score-name", "health", "score item name within the resource")
	fn.Flags.DurationVar(&s.ValidFor, "valid-for", 0, "validUntil of each score, counted from its event; 0: until the next event about the cluster (ApiServerSource sends only on changes)")

	fn.Main(func(ctx context.Context) error {
		s.Log = fn.Log // Parse replaced the logger with one at --log-level
		if err := s.Validate(); err != nil {
			return err
		}
		return fn.Serve(ctx, scorer.Handler(fn.Source(), s.Routes()), nil)
	})
}
