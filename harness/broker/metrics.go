package broker

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	outcomeDelivered    = "delivered"
	outcomeDeadLettered = "dead_lettered"
	outcomeDropped      = "dropped"
)

type metrics struct {
	ingress    *prometheus.CounterVec
	attempts   *prometheus.CounterVec
	outcomes   *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	pings      *prometheus.CounterVec
	queueDepth *prometheus.Desc
	triggers   []*triggerState
}

func newMetrics(reg prometheus.Registerer, triggers []*triggerState) *metrics {
	m := &metrics{
		ingress: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_broker_ingress_events_total",
			Help: "Events offered to the local broker, by broker, origin (ingress or reply) and HTTP status answered.",
		}, []string{"broker", "via", "code"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_broker_delivery_attempts_total",
			Help: "Requests to trigger subscribers, by trigger and HTTP status (500 when no answer, 502 for a non-event body).",
		}, []string{"trigger", "code"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_broker_deliveries_total",
			Help: "Finished deliveries, by trigger and outcome: delivered, dead_lettered or dropped.",
		}, []string{"trigger", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "scoreflow_broker_delivery_seconds",
			Help:    "Time from acceptance to a subscriber's 2xx, retries included, by trigger.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"trigger"}),
		pings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_broker_pings_total",
			Help: "PingSource firings, by pingsource and the HTTP status of its sink's answer.",
		}, []string{"pingsource", "code"}),
		queueDepth: prometheus.NewDesc("scoreflow_broker_queue_length",
			"Deliveries waiting for a worker, by trigger.", []string{"trigger"}, nil),
		triggers: triggers,
	}
	if reg != nil {
		reg.MustRegister(m.ingress, m.attempts, m.outcomes, m.latency, m.pings, m)
	}
	return m
}

// Describe and Collect export the queue lengths.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) { ch <- m.queueDepth }

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, t := range m.triggers {
		ch <- prometheus.MustNewConstMetric(m.queueDepth, prometheus.GaugeValue, float64(t.queue.len()), t.key)
	}
}

func (m *metrics) ingressed(broker, via string, status int) {
	if broker == "" {
		broker = "unknown" // the path is the client's: keep it out of label values
	}
	m.ingress.WithLabelValues(broker, via, strconv.Itoa(status)).Inc()
}

func (m *metrics) attempt(trigger string, o *outcome) {
	m.attempts.WithLabelValues(trigger, strconv.Itoa(o.status)).Inc()
}

func (m *metrics) outcome(trigger, outcome string) {
	m.outcomes.WithLabelValues(trigger, outcome).Inc()
}

func (m *metrics) delivered(trigger string, accepted time.Time) {
	m.outcome(trigger, outcomeDelivered)
	m.latency.WithLabelValues(trigger).Observe(time.Since(accepted).Seconds())
}

func (m *metrics) pinged(source string, status int) {
	m.pings.WithLabelValues(source, strconv.Itoa(status)).Inc()
}
