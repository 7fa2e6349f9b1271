// Command promql-scorer scores any PromQL query given in its PingSource's data into one
// AddOnPlacementScore per evaluation. See pkg/scorer/promql for the configuration.
package main

import (
	"context"
	"fmt"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/prom"
	"github.com/scoreflow/scoreflow/pkg/scorer"
	"github.com/scoreflow/scoreflow/pkg/scorer/promql"
)

func main() {
	fn := function.New("promql-scorer", "scores the result of any PromQL query given in its PingSource's data (query, optional range/step and aggregation, normalize, clusterLabel, resource, scoreName); "+
		"replies with one io.scoreflow.score.updated")
	promCfg := prom.RegisterFlags(fn.Flags)
	metricCfg := fn.Flags.String("metric-config", "", `JSON that makes the function also score io.scoreflow.metric.changed events: {"resource","metric","aggregation","normalize","scoreName"} (empty: such events are refused)`)
	// A result too large for one event sends all but its reply here (pkg/scorer).
	newSink := fn.OptionalSinkFlags()
	split := scorer.Flags(fn.Flags)
	fn.Main(func(ctx context.Context) error {
		sink, err := newSink()
		if err != nil {
			return err
		}
		s := &promql.Scorer{Log: fn.Log}
		if *metricCfg != "" {
			cfg := promql.DefaultMetricConfig()
			if err := contract.DecodeJSON([]byte(*metricCfg), &cfg); err != nil {
				return fmt.Errorf("--metric-config: %w", err)
			}
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("--metric-config: %w", err)
			}
			s.MetricConfig = &cfg
		}
		client, err := prom.New(*promCfg, fn.Log, fn.Registry)
		if err != nil {
			return err
		}
		s.Prom = client
		return fn.Serve(ctx, scorer.HandlerWith(fn.Source(), s.Routes(), sink, *split), nil)
	})
}
