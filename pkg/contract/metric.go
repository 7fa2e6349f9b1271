package contract

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// MaxSamples bounds one metric.changed event.
const MaxSamples = 10000

// MetricChanged is the data of io.scoreflow.metric.changed: samples for one or many clusters.
type MetricChanged struct {
	Samples []Sample `json:"samples"`
}

// Sample is one observed value of one metric on one cluster.
type Sample struct {
	Metric     string            `json:"metric"`
	Cluster    string            `json:"cluster"`
	Labels     map[string]string `json:"labels,omitempty"`
	Value      float64           `json:"value"`
	ObservedAt time.Time         `json:"observedAt"`
}

// Validate reports every problem, each naming its field.
func (m *MetricChanged) Validate() error {
	var errs FieldErrors
	switch {
	case len(m.Samples) == 0:
		errs = append(errs, fieldErr(ReasonInvalidData, "samples", "at least one sample is required"))
	case len(m.Samples) > MaxSamples:
		errs = append(errs, fieldErr(ReasonInvalidData, "samples", "%d samples, more than %d", len(m.Samples), MaxSamples))
	}
	for i, s := range m.Samples {
		f := fmt.Sprintf("samples[%d]", i)
		if err := ValidateMetricName(s.Metric); err != nil {
			errs = append(errs, fieldErr(ReasonInvalidData, f+".metric", "%v", err))
		}
		if err := ValidateClusterName(s.Cluster); err != nil {
			errs = append(errs, fieldErr(ReasonInvalidData, f+".cluster", "%v", err))
		}
		for k := range s.Labels {
			if err := ValidateLabelName(k); err != nil {
				errs = append(errs, fieldErr(ReasonInvalidData, f+".labels", "%v", err))
			}
		}
		if math.IsNaN(s.Value) || math.IsInf(s.Value, 0) {
			errs = append(errs, fieldErr(ReasonInvalidData, f+".value", "must be a finite number"))
		}
		if s.ObservedAt.IsZero() {
			errs = append(errs, fieldErr(ReasonInvalidData, f+".observedAt", "is required (RFC 3339 time)"))
		}
	}
	return errs.orNil()
}

// SeriesKey identifies the series a sample belongs to: its metric, cluster and labels. Samples of
// one series in one event are successive observations of the same thing.
func (s Sample) SeriesKey() string {
	names := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(s.Metric)
	b.WriteByte(0)
	b.WriteString(s.Cluster)
	for _, k := range names {
		b.WriteByte(0)
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(s.Labels[k])
	}
	return b.String()
}
