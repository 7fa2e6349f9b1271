// Package alertmanager turns Alertmanager webhook notifications (payload version 4) into
// io.scoreflow.metric.changed events: one sample per firing (1) or resolved (0) alert that names a
// managed cluster in a label, observed when the notification arrived.
package alertmanager

import (
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Version is the only webhook payload version Alertmanager has sent since 0.7.
const Version = "4"

// Alert statuses.
const (
	StatusFiring   = "firing"
	StatusResolved = "resolved"
)

// Payload is the body Alertmanager POSTs to a webhook receiver
// (prometheus/alertmanager notify/webhook.Message). Unknown fields are ignored: newer releases add
// some (truncatedAlerts did), and refusing them would make Alertmanager drop notifications.
type Payload struct {
	Version           string            `json:"version"`
	GroupKey          string            `json:"groupKey"`
	TruncatedAlerts   uint64            `json:"truncatedAlerts"`
	Status            string            `json:"status"`
	Receiver          string            `json:"receiver"`
	GroupLabels       map[string]string `json:"groupLabels"`
	CommonLabels      map[string]string `json:"commonLabels"`
	CommonAnnotations map[string]string `json:"commonAnnotations"`
	ExternalURL       string            `json:"externalURL"`
	Alerts            []Alert           `json:"alerts"`
}

// Alert is one alert of a notification. EndsAt is the zero time ("0001-01-01T00:00:00Z") while an
// alert fires with no known end.
type Alert struct {
	Status       string            `json:"status"`
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL"`
	Fingerprint  string            `json:"fingerprint"`
}

// ParsePayload decodes a webhook body. Its errors mean the payload is malformed: resending it will
// not help, so the caller answers 400.
func ParsePayload(body []byte) (*Payload, error) {
	var p Payload
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("payload is not an Alertmanager webhook JSON object: %v", err)
	}
	if p.Version != Version {
		return nil, fmt.Errorf("payload version is %q, want %q (Alertmanager webhook format)", p.Version, Version)
	}
	return &p, nil
}

// Skip reasons: why an alert produced no sample. They are metric label values.
const (
	SkipNoCluster      = "no_cluster_label"
	SkipInvalidCluster = "invalid_cluster"
	SkipNoMetricName   = "no_metric_name"
	SkipUnknownStatus  = "unknown_status"
)

// Skipped is an alert that produced no sample.
type Skipped struct {
	Reason      string
	AlertName   string
	Fingerprint string
}

// Mapping turns alerts into samples.
type Mapping struct {
	// ClusterLabel names the label that holds the managed cluster's name.
	ClusterLabel string
	// MetricName, when set, is the metric of every sample (e.g. scoreflow_alert_firing); the
	// alertname stays in the sample's labels.
	MetricName string
	// MetricPrefix is prepended to the sanitized alertname when MetricName is empty.
	MetricPrefix string
}

// Validate checks that every sample the mapping can build has valid names.
func (m Mapping) Validate() error {
	if err := contract.ValidateLabelName(m.ClusterLabel); err != nil {
		return fmt.Errorf("cluster label: %w", err)
	}
	if m.MetricName != "" {
		if err := contract.ValidateMetricName(m.MetricName); err != nil {
			return fmt.Errorf("metric name: %w", err)
		}
		return nil
	}
	if m.MetricPrefix != "" {
		if err := contract.ValidateMetricName(m.MetricPrefix); err != nil {
			return fmt.Errorf("metric prefix: %w", err)
		}
	}
	return nil
}

// Result is what one payload maps to.
type Result struct {
	Samples []contract.Sample
	Skipped []Skipped
	// DroppedLabels counts labels left out of samples because their names are not valid
	// Prometheus label names.
	DroppedLabels int
}

// Map builds one sample per usable alert, in payload order: value 1 for a firing alert, 0 for a
// resolved one, each observed at now, when the notification was received.
//
// A notification is Alertmanager's view of its alerts when it sent it, so that is when the value
// was observed. Not startsAt: an alert firing for hours is notified again every repeat_interval
// with the same startsAt, and samples dated there would make every score built from them expire
// while the alert still fires. Not endsAt for a resolved alert either: a firing notification that
// Alertmanager retried may arrive after the alert has ended, and a resolution dated before that
// arrival would be dropped as older by consumers that keep order (the score-writer), leaving the
// firing score in place. Notifications of one group are sent one after another, so receipt times
// keep their order.
func (m Mapping) Map(p *Payload, now time.Time) Result {
	var r Result
	for _, a := range p.Alerts {
		name := a.Labels["alertname"]
		skip := func(reason string) { r.Skipped = append(r.Skipped, Skipped{reason, name, a.Fingerprint}) }
		var value float64
		switch a.Status {
		case StatusFiring:
			value = 1
		case StatusResolved:
			value = 0
		default:
			skip(SkipUnknownStatus)
			continue
		}
		observed := now
		cluster, ok := a.Labels[m.ClusterLabel]
		if !ok || cluster == "" {
			skip(SkipNoCluster)
			continue
		}
		if contract.ValidateClusterName(cluster) != nil {
			skip(SkipInvalidCluster)
			continue
		}
		metric := m.metricName(name)
		if metric == "" {
			skip(SkipNoMetricName)
			continue
		}
		var labels map[string]string
		for k, v := range a.Labels {
			if k == m.ClusterLabel {
				continue // carried by Sample.Cluster
			}
			if contract.ValidateLabelName(k) != nil {
				r.DroppedLabels++
				continue
			}
			if labels == nil {
				labels = map[string]string{}
			}
			labels[k] = v
		}
		r.Samples = append(r.Samples, contract.Sample{
			Metric: metric, Cluster: cluster, Labels: labels, Value: value, ObservedAt: observed.UTC(),
		})
	}
	return r
}

func (m Mapping) metricName(alertname string) string {
	if m.MetricName != "" {
		return m.MetricName
	}
	if alertname == "" {
		return ""
	}
	return SanitizeMetricName(m.MetricPrefix + alertname)
}

var invalidMetricChars = regexp.MustCompile(`[^a-zA-Z0-9_:]`)

// SanitizeMetricName makes s a valid Prometheus metric name: every invalid character becomes '_',
// and a leading digit gets a '_' in front.
func SanitizeMetricName(s string) string {
	if s == "" {
		return ""
	}
	s = invalidMetricChars.ReplaceAllString(s, "_")
	if s[0] >= '0' && s[0] <= '9' {
		s = "_" + s
	}
	return s
}

// latest is the latest observation of samples: the event's time.
func latest(samples []contract.Sample) time.Time {
	var t time.Time
	for _, s := range samples {
		if s.ObservedAt.After(t) {
			t = s.ObservedAt
		}
	}
	return t
}
