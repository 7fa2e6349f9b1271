// Command forecast-scorer predicts each cluster's usage a horizon ahead (Holt's double exponential
// smoothing over a Prometheus range query) and scores the predicted headroom into one
// AddOnPlacementScore per evaluation. See pkg/scorer/forecast for the configuration.
package main

import (
	"context"

	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/prom"
	"github.com/scoreflow/scoreflow/pkg/scorer"
	"github.com/scoreflow/scoreflow/pkg/scorer/forecast"
)

func main() {
	fn := function.New("forecast-scorer", "forecasts each cluster's usage a horizon ahead (Holt's smoothing over a Prometheus range query) and scores the predicted headroom; "+
		"takes PingSource events whose data is its configuration (query, range, step, horizon, capacityQuery or capacity, scoreName, resource); replies with one io.scoreflow.score.updated")
	promCfg := prom.RegisterFlags(fn.Flags)
	// A result too large for one event sends all but its reply here (pkg/scorer).
	newSink := fn.OptionalSinkFlags()
	split := scorer.Flags(fn.Flags)
	fn.Main(func(ctx context.Context) error {
		sink, err := newSink()
		if err != nil {
			return err
		}
		client, err := prom.New(*promCfg, fn.Log, fn.Registry)
		if err != nil {
			return err
		}
		s := &forecast.Scorer{Prom: client, Log: fn.Log}
		return fn.Serve(ctx, scorer.HandlerWith(fn.Source(), s.Routes(), sink, *split), nil)
	})
}
