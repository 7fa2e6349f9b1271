// Command resource-scorer scores each managed cluster's free CPU, memory and GPU (allocatable minus
// requested, from kube-state-metrics in Prometheus) into one AddOnPlacementScore per evaluation.
// See pkg/scorer/resource for the configuration and the score names.
package main

import (
	"context"
	"fmt"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/prom"
	"github.com/scoreflow/scoreflow/pkg/scorer"
	"github.com/scoreflow/scoreflow/pkg/scorer/resource"
)

func main() {
	fn := function.New("resource-scorer", "scores free CPU, memory and GPU per cluster (allocatable minus requested, from kube-state-metrics in Prometheus); "+
		"takes PingSource events whose data is its configuration, and io.scoreflow.metric.changed events; replies with one io.scoreflow.score.updated")
	promCfg := prom.RegisterFlags(fn.Flags)
	metricCfg := fn.Flags.String("metric-config", "{}", `configuration (the PingSource data shape, JSON) for scoring io.scoreflow.metric.changed events, e.g. {"resource":"gpu-usage-score","scores":["free-capacity"]}`)
	// A result too large for one event sends all but its reply here (pkg/scorer).
	newSink := fn.OptionalSinkFlags()
	split := scorer.Flags(fn.Flags)
	fn.Main(func(ctx context.Context) error {
		sink, err := newSink()
		if err != nil {
			return err
		}
		cfg := resource.DefaultConfig()
		if err := contract.DecodeJSON([]byte(*metricCfg), &cfg); err != nil {
			return fmt.Errorf("--metric-config: %w", err)
		}
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("--metric-config: %w", err)
		}
		client, err := prom.New(*promCfg, fn.Log, fn.Registry)
		if err != nil {
			return err
		}
		s := &resource.Scorer{Prom: client, Log: fn.Log, MetricConfig: &cfg}
		return fn.Serve(ctx, scorer.HandlerWith(fn.Source(), s.Routes(), sink, *split), nil)
	})
}
