package forecast

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/prom"
	"github.com/scoreflow/scoreflow/pkg/scorer"
	"github.com/scoreflow/scoreflow/pkg/scorer/series"
)

// Scorer answers PingSource events: it forecasts usage and scores the predicted headroom.
type Scorer struct {
	Prom prom.Querier
	Log  *slog.Logger
	// Now is the evaluation time; nil means time.Now. Tests pin it to where they wrote samples.
	Now func() time.Time
}

// Routes is the scorer's inputs for scorer.Handler. A forecast needs history, which a
// metric.changed event does not carry: such events are refused (400 WrongType).
func (s *Scorer) Routes() scorer.Route { return scorer.Route{contract.TypePing: s.Ping} }

// Ping runs the usage range query (and the capacity query), forecasts, and scores.
func (s *Scorer) Ping(ctx context.Context, e event.Event) (*scorer.Result, error) {
	cfg := DefaultConfig()
	if err := scorer.DecodeConfig(e, &cfg); err != nil {
		return nil, err
	}
	step := time.Duration(cfg.Step)
	now := s.now()
	start, end := prom.AlignedRange(now, time.Duration(cfg.Range), step)
	usage, err := s.Prom.QueryRange(ctx, cfg.Query, start, end, step)
	if err != nil {
		return nil, err
	}
	capacity := func(string) (float64, bool) { return *cfg.Capacity, true }
	if cfg.CapacityQuery != "" {
		v, err := s.Prom.Query(ctx, cfg.CapacityQuery, end)
		if err != nil {
			return nil, err
		}
		caps, err := Capacities(v, cfg.ClusterLabel)
		if err != nil {
			return nil, scorer.Fail(contract.ReasonBadQuery, false, fmt.Errorf("capacityQuery: %w", err))
		}
		capacity = func(c string) (float64, bool) { v, ok := caps[c]; return v, ok }
	}
	in, skipped := cfg.Headrooms(usage, capacity, end)
	out := cfg.output()
	sc, err := out.Score(cfg.ClusterLabel, in)
	if err != nil {
		return nil, scorer.Fail(contract.ReasonBadQuery, false, err)
	}
	if s.Log != nil && (skipped != Skipped{} || sc.Dropped > 0) {
		s.Log.Info("series not forecast", "resource", cfg.Resource, "stale", skipped.Stale, "tooShort", skipped.Short,
			"noCapacity", skipped.NoCapacity, "badClusterOrName", sc.Dropped)
	}
	if len(sc.Items) == 0 {
		return nil, nil
	}
	// Dated now, not at end: end stays put for a whole step while pings repeat, and scores dated
	// there would expire up to a step early (the writer counts its TTL from this time) and could
	// not be refreshed by the pings in between. The forecast is the best one as of now: the
	// points after end are not on the grid yet.
	return &scorer.Result{Observed: now, Scores: contract.ScoreUpdated{Resource: cfg.Resource, Items: sc.Items}}, nil
}

// Skipped counts usage series that were not forecast, by why.
type Skipped struct {
	Stale      int // no point at the end of the range: the series has stopped
	Short      int // fewer than two points
	NoCapacity int // no capacity for its cluster, or a capacity not above 0
}

// Headrooms forecasts each usage series Horizon past end and returns its predicted headroom
// fraction, (capacity - max(predicted, 0)) / capacity, labelled as the series.
func (c *Config) Headrooms(usage model.Matrix, capacity func(cluster string) (float64, bool), end time.Time) ([]series.Input, Skipped) {
	var skipped Skipped
	step := time.Duration(c.Step)
	ahead := float64(time.Duration(c.Horizon)) / float64(step)
	endMs := model.TimeFromUnixNano(end.UnixNano())
	in := make([]series.Input, 0, len(usage))
	for _, s := range usage {
		ps := Points(s.Values, endMs, step)
		predicted, ok := Holt(ps, c.Alpha, c.Beta, ahead)
		switch {
		case !ok:
			skipped.Short++
			continue
		case ps[len(ps)-1].X != 0:
			// Never score a cluster on data that stopped coming: leave it out.
			skipped.Stale++
			continue
		}
		capa, ok := capacity(string(s.Metric[model.LabelName(c.ClusterLabel)]))
		if !ok || !(capa > 0) {
			skipped.NoCapacity++
			continue
		}
		in = append(in, series.Input{Metric: s.Metric, Value: (capa - math.Max(predicted, 0)) / capa})
	}
	return in, skipped
}

// Capacities reads a capacity query's result: one value per cluster.
func Capacities(v model.Vector, clusterLabel string) (map[string]float64, error) {
	out := make(map[string]float64, len(v))
	for _, s := range v {
		c := string(s.Metric[model.LabelName(clusterLabel)])
		if _, dup := out[c]; dup {
			return nil, fmt.Errorf("two series for cluster %q: aggregate by %s", c, clusterLabel)
		}
		out[c] = float64(s.Value)
	}
	return out, nil
}

func (s *Scorer) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}
