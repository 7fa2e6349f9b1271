package promql

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/prom"
	"github.com/scoreflow/scoreflow/pkg/scorer/normalize"
	"github.com/scoreflow/scoreflow/pkg/scorer/series"
)

// Config is a PingSource's data: one query, one score resource.
//
//	{"resource": "gpu-usage-score",
//	 "query": "avg by (cluster, app, device) (gpu_utilization)",
//	 "range": "30m", "step": "1m", "aggregation": "p95",
//	 "normalize": {"method": "linear", "min": 0, "max": 100, "lowerIsBetter": true},
//	 "scoreName": "${app};${device}"}
type Config struct {
	series.Output
	// Query is any PromQL whose result has the cluster label (and the labels ScoreName uses).
	Query string `json:"query"`
	// Range and Step, both or neither, make it a range query over [now-range, now] (now aligned
	// down to a multiple of step) whose points Aggregation reduces. Durations as Prometheus writes
	// them: 30s, 5m, 1h, 1d.
	Range model.Duration `json:"range,omitempty"`
	Step  model.Duration `json:"step,omitempty"`
	// Aggregation over each series' points: last, avg, min, max or p95. Required with a range;
	// an instant query has one point, so it takes none (or last).
	Aggregation string `json:"aggregation,omitempty"`
	// ClusterLabel names the managed cluster. Default cluster.
	ClusterLabel string `json:"clusterLabel,omitempty"`
}

// DefaultConfig holds the defaults a PingSource's data is decoded over.
func DefaultConfig() Config { return Config{ClusterLabel: series.DefaultClusterLabel} }

// DefaultMetricConfig holds the defaults --metric-config is decoded over.
func DefaultMetricConfig() MetricConfig { return MetricConfig{Aggregation: normalize.AggLast} }

// Validate checks the configuration, naming each field at fault.
func (c *Config) Validate() error {
	errs := []error{c.Output.Validate()}
	if strings.TrimSpace(c.Query) == "" {
		errs = append(errs, errors.New("query: is required"))
	}
	if err := contract.ValidateLabelName(c.ClusterLabel); err != nil {
		errs = append(errs, fmt.Errorf("clusterLabel: %v", err))
	}
	switch {
	case c.IsRange():
		if err := prom.CheckRange(time.Duration(c.Range), time.Duration(c.Step)); err != nil {
			errs = append(errs, fmt.Errorf("range, step: %v", err))
		}
		if c.Aggregation == "" {
			errs = append(errs, errors.New("aggregation: is required with a range (last, avg, min, max or p95)"))
		} else if err := normalize.ValidateAggregation(c.Aggregation); err != nil {
			errs = append(errs, fmt.Errorf("aggregation: %v", err))
		}
	case c.Range != 0 || c.Step != 0:
		errs = append(errs, errors.New("range, step: give both for a range query, or neither for an instant query"))
	case c.Aggregation != "" && c.Aggregation != normalize.AggLast:
		errs = append(errs, fmt.Errorf("aggregation: %q needs a range and step; an instant query has one point per series", c.Aggregation))
	}
	return errors.Join(errs...)
}

// IsRange reports whether the configuration asks for a range query.
func (c *Config) IsRange() bool { return c.Range != 0 && c.Step != 0 }

// MetricConfig scores io.scoreflow.metric.changed events (the function's --metric-config): the
// samples of Metric, each series' samples in the event reduced by Aggregation.
//
//	{"resource": "gpu-usage-score", "metric": "gpu_utilization", "aggregation": "avg",
//	 "normalize": {"method": "linear", "min": 0, "max": 100, "lowerIsBetter": true},
//	 "scoreName": "${device}"}
type MetricConfig struct {
	series.Output
	// Metric is the metric name whose samples are scored; other samples are ignored.
	Metric string `json:"metric"`
	// Aggregation of each series' samples in one event, in time order. Default last.
	Aggregation string `json:"aggregation,omitempty"`
}

// Validate checks the configuration, naming each field at fault.
func (c *MetricConfig) Validate() error {
	errs := []error{c.Output.Validate()}
	if err := contract.ValidateMetricName(c.Metric); err != nil {
		errs = append(errs, fmt.Errorf("metric: %v", err))
	}
	if err := normalize.ValidateAggregation(c.Aggregation); err != nil {
		errs = append(errs, fmt.Errorf("aggregation: %v", err))
	}
	return errors.Join(errs...)
}
