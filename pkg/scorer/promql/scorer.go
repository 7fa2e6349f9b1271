package promql

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/prom"
	"github.com/scoreflow/scoreflow/pkg/scorer"
	"github.com/scoreflow/scoreflow/pkg/scorer/normalize"
	"github.com/scoreflow/scoreflow/pkg/scorer/series"
)

// Scorer runs the query in each PingSource event's data and scores its result.
type Scorer struct {
	Prom prom.Querier
	Log  *slog.Logger
	// MetricConfig, when set, also scores metric.changed events; nil refuses them (WrongType).
	MetricConfig *MetricConfig
	// Now is the evaluation time; nil means time.Now. Tests pin it to where they wrote samples.
	Now func() time.Time
}

// Routes is the scorer's inputs for scorer.Handler.
func (s *Scorer) Routes() scorer.Route {
	r := scorer.Route{contract.TypePing: s.Ping}
	if s.MetricConfig != nil {
		r[contract.TypeMetricChanged] = s.Metrics
	}
	return r
}

// Ping queries Prometheus as the event's data says and scores the result.
func (s *Scorer) Ping(ctx context.Context, e event.Event) (*scorer.Result, error) {
	cfg := DefaultConfig()
	if err := scorer.DecodeConfig(e, &cfg); err != nil {
		return nil, err
	}
	in, observed, err := cfg.Run(ctx, s.Prom, s.now())
	if err != nil {
		return nil, err
	}
	sc, err := cfg.Score(cfg.ClusterLabel, in)
	if err != nil {
		return nil, scorer.Fail(contract.ReasonBadQuery, false, err)
	}
	return s.result(cfg.Resource, sc, observed), nil
}

// Run evaluates the configured query at now (instant), or over the range ending at now aligned
// down to step, and reduces each series to one value. observed is the evaluation time, now, for
// both: a range's aligned end stays put for a whole step while pings repeat, and scores dated
// there would expire up to a step early (the writer counts its TTL from this time) and could not
// be refreshed by the pings in between.
func (c *Config) Run(ctx context.Context, q prom.Querier, now time.Time) (in []series.Input, observed time.Time, err error) {
	if !c.IsRange() {
		v, err := q.Query(ctx, c.Query, now)
		if err != nil {
			return nil, time.Time{}, err
		}
		return series.FromVector(v), now, nil
	}
	step := time.Duration(c.Step)
	start, end := prom.AlignedRange(now, time.Duration(c.Range), step)
	m, err := q.QueryRange(ctx, c.Query, start, end, step)
	if err != nil {
		return nil, time.Time{}, err
	}
	return series.FromMatrix(m, c.Aggregation), now, nil
}

// Metrics scores the samples of MetricConfig.Metric in a metric.changed event, without a query.
// Series are told apart by cluster and labels; ScoreName sees the labels plus "cluster". The
// scores are dated by the stalest series' latest sample.
func (s *Scorer) Metrics(_ context.Context, e event.Event) (*scorer.Result, error) {
	m, err := contract.DecodeMetricChanged(&e)
	if err != nil {
		return nil, err
	}
	cfg := s.MetricConfig
	byKey := map[string][]contract.Sample{}
	for _, smp := range m.Samples {
		if smp.Metric == cfg.Metric {
			k := smp.SeriesKey()
			byKey[k] = append(byKey[k], smp)
		}
	}
	in := make([]series.Input, 0, len(byKey))
	var observed time.Time
	for _, ss := range byKey {
		slices.SortStableFunc(ss, func(a, b contract.Sample) int { return a.ObservedAt.Compare(b.ObservedAt) })
		vals := make([]float64, len(ss))
		for i, smp := range ss {
			vals[i] = smp.Value
		}
		metric := model.Metric{series.DefaultClusterLabel: model.LabelValue(ss[0].Cluster)}
		for k, v := range ss[0].Labels {
			if k != series.DefaultClusterLabel {
				metric[model.LabelName(k)] = model.LabelValue(v)
			}
		}
		in = append(in, series.Input{Metric: metric, Value: normalize.Aggregate(cfg.Aggregation, vals)})
		if last := ss[len(ss)-1].ObservedAt; observed.IsZero() || last.Before(observed) {
			observed = last
		}
	}
	sc, err := cfg.Score(series.DefaultClusterLabel, in)
	if err != nil {
		return nil, scorer.BadConfig("--metric-config: %v", err)
	}
	return s.result(cfg.Resource, sc, observed), nil
}

func (s *Scorer) result(resource string, sc series.Scored, observed time.Time) *scorer.Result {
	if sc.Dropped > 0 && s.Log != nil {
		attrs := []any{"resource", resource, "count", sc.Dropped}
		if sc.NameErr != nil {
			attrs = append(attrs, "nameErr", sc.NameErr.Error())
		}
		s.Log.Warn("series without a valid cluster or score name were not scored", attrs...)
	}
	if len(sc.Items) == 0 {
		return nil
	}
	return &scorer.Result{Observed: observed, Scores: contract.ScoreUpdated{Resource: resource, Items: sc.Items}}
}

func (s *Scorer) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}
