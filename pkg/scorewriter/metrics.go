package scorewriter

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the writer's Prometheus metrics.
type Metrics struct {
	items       *prometheus.CounterVec
	latency     prometheus.Histogram
	apiRequests *prometheus.CounterVec
	batchSize   prometheus.Histogram
	score       *prometheus.GaugeVec
	updatedAt   *prometheus.GaugeVec
	validUntil  *prometheus.GaugeVec
	replies     *prometheus.CounterVec
	pending     prometheus.GaugeFunc
}

// NewMetrics registers the writer's metrics with reg. pending reports updates waiting to be written.
func NewMetrics(reg prometheus.Registerer, pending func() float64) *Metrics {
	m := &Metrics{
		items: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_writer_items_total",
			Help: "Cluster items of score.updated events, by outcome (Written, Skipped, Failed) and reason.",
		}, []string{"outcome", "reason"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "scoreflow_writer_write_latency_seconds",
			Help:    "From an item's arrival to its scores being on the hub (or its failure).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		apiRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_writer_api_requests_total",
			Help: "Requests to the hub API, by verb (get, create, update_status) and result (ok, conflict, error).",
		}, []string{"verb", "result"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "scoreflow_writer_updates_per_write",
			Help:    "Updates merged into one write of one AddOnPlacementScore.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}),
		score: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "scoreflow_score",
			Help: "Current value of each score written, per cluster, AddOnPlacementScore and score name (the Dynamic Scoring Framework's dynamic_score).",
		}, []string{"cluster", "resource", "score"}),
		// Freshness per object: dashboards show the age of each cluster's scores and alerts fire
		// on scores nobody has refreshed, which scoreflow_score alone cannot tell.
		updatedAt: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "scoreflow_score_updated_timestamp_seconds",
			Help: "Unix time this writer last wrote new scores into an AddOnPlacementScore (rewrites that only drop expired scores do not count), per cluster and AddOnPlacementScore.",
		}, []string{"cluster", "resource"}),
		validUntil: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "scoreflow_score_valid_until_timestamp_seconds",
			Help: "Unix time an AddOnPlacementScore's scores expire (its status.validUntil), per cluster and AddOnPlacementScore; absent when they never expire.",
		}, []string{"cluster", "resource"}),
		replies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_writer_events_total",
			Help: "score.updated events answered, by reply type (write.done, write.failed) and whether the event was a redelivery.",
		}, []string{"reply", "duplicate"}),
	}
	m.pending = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "scoreflow_writer_pending_updates",
		Help: "Updates accepted and not yet written.",
	}, pending)
	reg.MustRegister(m.items, m.latency, m.apiRequests, m.batchSize, m.score, m.updatedAt, m.validUntil, m.replies, m.pending)
	return m
}
