package dsf

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// metrics are scoreflow's own, beside DSF's (dsfMetrics): labelled by scorer, a DynamicScorer's
// metadata.name, so only scorers the administrator configured ever appear, and a scorer no longer
// configured is forgotten.
type metrics struct {
	clamped *prometheus.CounterVec
	dropped *prometheus.CounterVec
	scoring *prometheus.HistogramVec
	source  *prometheus.HistogramVec
	rounds  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	buckets := prometheus.ExponentialBuckets(0.001, 2, 16)
	m := &metrics{
		clamped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_dsf_scores_clamped_total",
			Help: "Scores a DSF scorer returned outside [-100, 100] (after truncation), written as -100 or 100, by scorer (DynamicScorer name).",
		}, []string{"scorer"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_dsf_results_dropped_total",
			Help: "Scorer results not written, by scorer and why: score (missing or not finite), cluster (hub mode: no valid cluster label), masked, name (not an AddOnPlacementScore item name), duplicate (a name given twice: the first is kept), cap (too many names for one cluster).",
		}, []string{"scorer", "why"}),
		scoring: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "scoreflow_dsf_scoring_seconds",
			Help:    "Calls of a scorer's scoring endpoint by scorer and outcome (ok, unavailable, failed).",
			Buckets: buckets,
		}, []string{"scorer", "outcome"}),
		source: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "scoreflow_dsf_source_seconds",
			Help:    "A round's range queries to the scorer's Prometheus, by scorer and outcome (ok, unavailable, failed).",
			Buckets: buckets,
		}, []string{"scorer", "outcome"}),
		rounds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_dsf_rounds_total",
			Help: "Agent mode: rounds by scorer (DynamicScorer name) and outcome: sent, scored (scoreDestination None: exported as dynamic_score only), empty, skipped (masked, not Active, not synced), failed.",
		}, []string{"scorer", "outcome"}),
	}
	for _, c := range []prometheus.Collector{m.clamped, m.dropped, m.scoring, m.source, m.rounds} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(h *prometheus.HistogramVec, name string, began time.Time, err error) {
	outcome := "ok"
	var se *scorer.Error
	if errors.As(err, &se) {
		outcome = "failed"
		if se.Retriable {
			outcome = "unavailable"
		}
	} else if err != nil {
		outcome = "failed"
	}
	h.WithLabelValues(name, outcome).Observe(time.Since(began).Seconds())
}

func (m *metrics) forget(name string) {
	l := prometheus.Labels{"scorer": name}
	m.clamped.DeletePartialMatch(l)
	m.dropped.DeletePartialMatch(l)
	m.scoring.DeletePartialMatch(l)
	m.source.DeletePartialMatch(l)
	m.rounds.DeletePartialMatch(l)
}
