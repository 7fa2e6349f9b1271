package forecast

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/prom"
	"github.com/scoreflow/scoreflow/pkg/scorer/normalize"
	"github.com/scoreflow/scoreflow/pkg/scorer/series"
)

// Config is a PingSource's data.
//
//	{"resource": "cpu-forecast",
//	 "query": "sum by (cluster) (rate(container_cpu_usage_seconds_total{container!=\"\"}[5m]))",
//	 "capacityQuery": "sum by (cluster) (kube_node_status_allocatable{resource=\"cpu\"})",
//	 "range": "6h", "step": "5m", "horizon": "1h",
//	 "scoreName": "cpuHeadroom1h"}
type Config struct {
	// Resource is the AddOnPlacementScore to write.
	Resource string `json:"resource"`
	// ScoreName names each score from the usage series' labels ("cpuHeadroom", "${device}").
	ScoreName normalize.NameFormat `json:"scoreName"`
	// Query is the usage, a range query over [now-range, now] at step (now aligned down to step).
	Query string         `json:"query"`
	Range model.Duration `json:"range"`
	Step  model.Duration `json:"step"`
	// Horizon is how far past now to predict.
	Horizon model.Duration `json:"horizon"`
	// Capacity is what usage is measured against: an instant query with one series per cluster
	// (CapacityQuery), or one number for every cluster (Capacity). Exactly one is required.
	CapacityQuery string   `json:"capacityQuery,omitempty"`
	Capacity      *float64 `json:"capacity,omitempty"`
	// Alpha and Beta are Holt's smoothing factors for level and trend, in (0, 1].
	Alpha float64 `json:"alpha,omitempty"`
	Beta  float64 `json:"beta,omitempty"`
	// Normalize maps the predicted headroom fraction, (capacity - predicted) / capacity, to a
	// score. Default linear from -1 to 1, which is round(100 * headroom): 100 = predicted idle,
	// 0 = predicted full, negative = predicted over capacity (-100 at twice the capacity).
	Normalize *normalize.Normalization `json:"normalize,omitempty"`
	// ClusterLabel names the managed cluster, in both queries. Default cluster.
	ClusterLabel string `json:"clusterLabel,omitempty"`
}

// Defaults. Alpha 0.5 lets the level follow the last few steps; beta 0.1 averages the trend over
// about ten steps, so one noisy step does not swing a forecast an hour out.
const (
	DefaultAlpha = 0.5
	DefaultBeta  = 0.1
)

// DefaultConfig holds the defaults a PingSource's data is decoded over.
func DefaultConfig() Config {
	return Config{Alpha: DefaultAlpha, Beta: DefaultBeta, ClusterLabel: series.DefaultClusterLabel}
}

// DefaultNormalization is round(100 * headroom), clamped.
func DefaultNormalization() normalize.Normalization {
	lo, hi := -1.0, 1.0
	return normalize.Normalization{Method: normalize.MethodLinear, Min: &lo, Max: &hi}
}

// Validate checks the configuration, naming each field at fault.
func (c *Config) Validate() error {
	var errs []error
	if err := contract.ValidateResourceName(c.Resource); err != nil {
		errs = append(errs, fmt.Errorf("resource: %v", err))
	}
	if err := c.ScoreName.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("scoreName: %v", err))
	}
	if strings.TrimSpace(c.Query) == "" {
		errs = append(errs, errors.New("query: is required"))
	}
	if err := prom.CheckRange(time.Duration(c.Range), time.Duration(c.Step)); err != nil {
		errs = append(errs, fmt.Errorf("range, step: %v", err))
	}
	if c.Horizon <= 0 {
		errs = append(errs, errors.New("horizon: is required and must be positive, e.g. 1h"))
	}
	switch {
	case (c.CapacityQuery == "") == (c.Capacity == nil):
		errs = append(errs, errors.New("capacityQuery, capacity: give exactly one"))
	case c.Capacity != nil && !(*c.Capacity > 0 && !math.IsInf(*c.Capacity, 0)):
		errs = append(errs, fmt.Errorf("capacity: must be a positive number, not %v", *c.Capacity))
	}
	if !(c.Alpha > 0 && c.Alpha <= 1) {
		errs = append(errs, fmt.Errorf("alpha: must be in (0, 1], not %v", c.Alpha))
	}
	if !(c.Beta > 0 && c.Beta <= 1) {
		errs = append(errs, fmt.Errorf("beta: must be in (0, 1], not %v", c.Beta))
	}
	if c.Normalize != nil {
		if err := c.Normalize.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := contract.ValidateLabelName(c.ClusterLabel); err != nil {
		errs = append(errs, fmt.Errorf("clusterLabel: %v", err))
	}
	return errors.Join(errs...)
}

// output is how headroom fractions become scores.
func (c *Config) output() series.Output {
	n := DefaultNormalization()
	if c.Normalize != nil {
		n = *c.Normalize
	}
	return series.Output{Resource: c.Resource, ScoreName: c.ScoreName, Normalize: n}
}
