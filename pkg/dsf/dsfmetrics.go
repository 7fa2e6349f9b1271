package dsf

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DSF's agent metrics, with DSF's names, labels and values (pkg/common/const.go and
// pkg/dynamic_scoring_agent/agent.go of open-cluster-management-io/dynamic-scoring-framework), so
// that DSF's ServiceMonitor, remote-write filter and Grafana dashboard select them as they are.
const (
	MetricScore          = "dynamic_score"
	MetricRequests       = "dynamic_scoring_requests_total"
	MetricFetchSeconds   = "dynamic_scoring_fetch_seconds_total"
	MetricPerformSeconds = "dynamic_scoring_perform_seconds_total"
	MetricSendSeconds    = "dynamic_scoring_send_seconds_total"
)

// scoreLabels are dynamic_score's labels, in DSF's order; each value is cut to 256 bytes, as DSF's
// agent cuts them.
var scoreLabels = []string{"ds_cluster", "ds_node", "ds_device", "ds_namespace", "ds_app", "ds_pod", "ds_container", "ds_meta", "ds_score_name"}

const maxScoreLabel = 256

// dsfMetrics are DSF's agent metrics. Series are by score name (scoring.params.name), as DSF's
// are: only scorers a DynamicScorer configures appear, and a scorer that stops is forgotten.
type dsfMetrics struct {
	score                  *prometheus.GaugeVec
	requests               *prometheus.CounterVec
	fetch, perform, sendTo *prometheus.CounterVec

	mu   sync.Mutex
	last map[string]map[string][]string // score name -> the label sets set by its last round
}

func newDSFMetrics(reg prometheus.Registerer) (*dsfMetrics, error) {
	m := &dsfMetrics{
		score: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricScore,
			Help: "Dynamic score from each scorer: each result's raw score, labelled by the cluster and the result's labels (DSF's agent metric).",
		}, scoreLabels),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRequests,
			Help: "Scoring rounds by score name and status, success or failure (DSF's agent metric).",
		}, []string{"score_name", "status"}),
		fetch: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricFetchSeconds,
			Help: "Seconds spent in successful source queries, by score name (DSF's agent metric).",
		}, []string{"score_name"}),
		perform: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPerformSeconds,
			Help: "Seconds spent in successful scoring calls, by score name (DSF's agent metric).",
		}, []string{"score_name"}),
		sendTo: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricSendSeconds,
			Help: "Seconds spent sending scores to their destination (the hub's agent gateway), by score name (DSF's agent metric).",
		}, []string{"score_name"}),
		last: map[string]map[string][]string{},
	}
	for _, c := range []prometheus.Collector{m.score, m.requests, m.fetch, m.perform, m.sendTo} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// scores sets dynamic_score for every result of one round of score name, each result's cluster
// given by clusterOf, and removes the series the previous round set that this one did not. A
// result without a score sets none.
func (m *dsfMetrics) scores(name string, results []Result, clusterOf func(Result) string) {
	now := map[string][]string{}
	for _, r := range results {
		if r.Score == nil {
			continue
		}
		values := []string{clusterOf(r), r.Metric["node"], r.Metric["device"], r.Metric["namespace"], r.Metric["app"],
			r.Metric["pod"], r.Metric["container"], r.Metric["meta"], name}
		for i, v := range values {
			if len(v) > maxScoreLabel {
				values[i] = v[:maxScoreLabel]
			}
		}
		m.score.WithLabelValues(values...).Set(*r.Score)
		now[strings.Join(values, "\x00")] = values
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, values := range m.last[name] {
		if _, ok := now[key]; !ok {
			m.score.DeleteLabelValues(values...)
		}
	}
	m.last[name] = now
}

// forgetScores removes every dynamic_score series of score name: its scorer stopped, or does not
// run for this cluster now (masked, inactive), as DSF's agent removes a stopped worker's series.
func (m *dsfMetrics) forgetScores(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.score.DeletePartialMatch(prometheus.Labels{"ds_score_name": name})
	delete(m.last, name)
}

// round counts one round of score name: success or failure, as DSF's agent counts a tick.
func (m *dsfMetrics) round(name string, err error) {
	status := "success"
	if err != nil {
		status = "failure"
	}
	m.requests.WithLabelValues(name, status).Inc()
}

func addSince(c *prometheus.CounterVec, name string, began time.Time) {
	c.WithLabelValues(name).Add(time.Since(began).Seconds())
}
