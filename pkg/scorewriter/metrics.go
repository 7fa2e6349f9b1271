package scorewriter

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"
)

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
	dropped     prometheus.Counter
	leading     prometheus.Gauge

	// The per-cluster series above (score, updatedAt, validUntil) cost about half a KiB each, and
	// a fleet has clusters x resources x (scores + 2) of them: beyond maxSeries an object gets
	// none, and only the per-resource aggregates (byResource) speak for it.
	mu        sync.Mutex
	maxSeries int
	used      int
	// usedNow is used, read without mu by the series gauge: a scrape computes gauge funcs while
	// collectors hold their vectors' locks, and observe holds mu while it waits for one of those.
	usedNow atomic.Int64
	objects map[Key]*objectSeries // objects holding series
	updated map[Key]float64       // every object's last write of new scores, for the aggregates
}

// objectSeries are the per-cluster series one object holds.
type objectSeries struct {
	updated, valid bool
	scores         map[string]struct{}
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
			Help: "Requests to the hub API, by verb (get, list, create, update_status, delete) and result (ok, conflict, error).",
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
	m.dropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "scoreflow_writer_score_series_dropped_total",
		Help: "Per-cluster series (scoreflow_score, scoreflow_score_updated_timestamp_seconds, scoreflow_score_valid_until_timestamp_seconds) not set because --max-score-series were in use, counted at each write that would have set them.",
	})
	m.leading = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "scoreflow_writer_leading",
		Help: "1 while this replica does the writer's work of its own accord (expiry, masks, deleting objects left without scores), under its Lease; 0 otherwise.",
	})
	m.maxSeries = DefaultOptions().MaxScoreSeries
	m.objects = map[Key]*objectSeries{}
	m.updated = map[Key]float64{}
	series := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "scoreflow_writer_score_series",
		Help: "Per-cluster score and freshness series this writer exports (at most --max-score-series).",
	}, func() float64 { return float64(m.usedNow.Load()) })
	reg.MustRegister(m.items, m.latency, m.apiRequests, m.batchSize, m.score, m.updatedAt, m.validUntil, m.replies, m.pending,
		m.dropped, m.leading, series, byResource{m})
	return m
}

var (
	oldestDesc = prometheus.NewDesc("scoreflow_score_oldest_updated_timestamp_seconds",
		"Per AddOnPlacementScore name: the oldest Unix time this writer last wrote new scores into one of its objects (the stalest cluster), whatever --max-score-series.",
		[]string{"resource"}, nil)
	objectsDesc = prometheus.NewDesc("scoreflow_score_updated_objects",
		"Per AddOnPlacementScore name: objects (clusters) this writer has written new scores into and still knows.",
		[]string{"resource"}, nil)
)

// byResource exports freshness per resource name: a handful of series whatever the fleet's size,
// so the stale-score alert sees every object even those beyond --max-score-series.
type byResource struct{ m *Metrics }

func (b byResource) Describe(ch chan<- *prometheus.Desc) { ch <- oldestDesc; ch <- objectsDesc }

func (b byResource) Collect(ch chan<- prometheus.Metric) {
	type agg struct {
		oldest float64
		n      int
	}
	rs := map[string]*agg{}
	b.m.mu.Lock()
	for k, t := range b.m.updated {
		a := rs[k.Resource]
		if a == nil {
			rs[k.Resource] = &agg{oldest: t, n: 1}
			continue
		}
		a.n++
		if t < a.oldest {
			a.oldest = t
		}
	}
	b.m.mu.Unlock()
	for r, a := range rs {
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, a.oldest, r)
		ch <- prometheus.MustNewConstMetric(objectsDesc, prometheus.GaugeValue, float64(a.n), r)
	}
}

// addUsed counts n more series in use (fewer when negative); m.mu is held.
func (m *Metrics) addUsed(n int) {
	m.used += n
	m.usedNow.Store(int64(m.used))
}

// take reserves one series; m.mu is held.
func (m *Metrics) take() bool {
	if m.used < m.maxSeries {
		m.addUsed(1)
		return true
	}
	m.dropped.Inc()
	return false
}

// observe sets key's series after a write: written says it took new scores (at now), validUntil
// and scores are what the object holds now. Series of scores it no longer has are deleted.
func (m *Metrics) observe(key Key, written bool, now time.Time, validUntil *metav1.Time, scores []clusterv1alpha1.AddOnPlacementScoreItem) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if written {
		m.updated[key] = float64(now.UnixMilli()) / 1000
	}
	o := m.objects[key]
	if o == nil {
		// An object gets all its series or none, so that those shown are whole.
		need := len(scores)
		if written {
			need++
		}
		if validUntil != nil {
			need++
		}
		if need == 0 {
			return
		}
		if m.used+need > m.maxSeries {
			m.dropped.Add(float64(need))
			return
		}
		o = &objectSeries{scores: map[string]struct{}{}}
		m.objects[key] = o
	}
	if written && (o.updated || m.take()) {
		o.updated = true
		m.updatedAt.WithLabelValues(key.Cluster, key.Resource).Set(m.updated[key])
	}
	switch {
	case validUntil != nil && (o.valid || m.take()):
		o.valid = true
		m.validUntil.WithLabelValues(key.Cluster, key.Resource).Set(float64(validUntil.UnixMilli()) / 1000)
	case validUntil == nil && o.valid:
		o.valid = false
		m.addUsed(-1)
		m.validUntil.DeleteLabelValues(key.Cluster, key.Resource)
	}
	kept := make(map[string]struct{}, len(scores))
	for _, s := range scores {
		kept[s.Name] = struct{}{}
		if _, ok := o.scores[s.Name]; ok || m.take() {
			o.scores[s.Name] = struct{}{}
			m.score.WithLabelValues(key.Cluster, key.Resource, s.Name).Set(float64(s.Value))
		}
	}
	for name := range o.scores {
		if _, ok := kept[name]; !ok {
			delete(o.scores, name)
			m.addUsed(-1)
			m.score.DeleteLabelValues(key.Cluster, key.Resource, name)
		}
	}
	if !o.updated && !o.valid && len(o.scores) == 0 {
		delete(m.objects, key)
	}
}

// follow sets the series of an object this writer exports series of to what the hub holds now:
// the informer reports it after any write, this writer's or another's.
func (m *Metrics) follow(key Key, validUntil *metav1.Time, scores []clusterv1alpha1.AddOnPlacementScoreItem) {
	m.mu.Lock()
	_, ok := m.objects[key]
	m.mu.Unlock()
	if ok {
		m.observe(key, false, time.Time{}, validUntil, scores)
	}
}

// forget deletes the series of an object the hub no longer has.
func (m *Metrics) forget(key Key) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.updated, key)
	o := m.objects[key]
	if o == nil {
		return
	}
	delete(m.objects, key)
	m.addUsed(-len(o.scores))
	if o.updated {
		m.addUsed(-1)
	}
	if o.valid {
		m.addUsed(-1)
	}
	m.score.DeletePartialMatch(map[string]string{"cluster": key.Cluster, "resource": key.Resource})
	m.updatedAt.DeleteLabelValues(key.Cluster, key.Resource)
	m.validUntil.DeleteLabelValues(key.Cluster, key.Resource)
}

// forgetCluster deletes the series of every object of a cluster that is gone.
func (m *Metrics) forgetCluster(cluster string) {
	m.mu.Lock()
	var keys []Key
	for k := range m.updated {
		if k.Cluster == cluster {
			keys = append(keys, k)
		}
	}
	for k := range m.objects {
		if k.Cluster == cluster {
			keys = append(keys, k)
		}
	}
	m.mu.Unlock()
	for _, k := range keys {
		m.forget(k)
	}
}
