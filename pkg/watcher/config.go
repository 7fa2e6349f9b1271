package watcher

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// DefaultClusterLabel is the series label that names the managed cluster unless a query says otherwise.
const DefaultClusterLabel = "cluster"

// Config is the watcher's configuration file (YAML or JSON).
type Config struct {
	Queries []Query `json:"queries"`
}

// Query is one PromQL query whose result series become samples of Metric.
type Query struct {
	// Metric is the metric name the samples carry (a Prometheus metric name).
	Metric string `json:"metric"`
	// Query is PromQL returning an instant vector with the cluster label on every series.
	Query string `json:"query"`
	// ClusterLabel names the label holding the managed cluster's name (default "cluster").
	ClusterLabel string `json:"clusterLabel,omitempty"`
	// Deadband is how far a value must move from the value last emitted to be emitted again.
	Deadband Deadband `json:"deadband"`
}

// Deadband: a series is emitted again when |value - last| > max(Absolute, Relative*|last|), so
// Absolute is the floor near zero and Relative scales with the value. Both zero: any change.
type Deadband struct {
	Absolute float64 `json:"absolute,omitempty"`
	Relative float64 `json:"relative,omitempty"`
}

// Beyond reports whether value moved out of the band around last.
func (d Deadband) Beyond(last, value float64) bool {
	return math.Abs(value-last) > max(d.Absolute, d.Relative*math.Abs(last))
}

// LoadConfig reads a YAML or JSON file strictly: an unknown or repeated field is an error, so a
// typo (dedband:) is reported rather than silently meaning "no deadband".
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}

// Validate defaults the cluster labels and reports every problem, naming its query.
func (c *Config) Validate() error {
	if len(c.Queries) == 0 {
		return errors.New("no queries: give --config with queries, or --metric and --query")
	}
	var errs []string
	metrics := map[string]int{}
	for i := range c.Queries {
		q := &c.Queries[i]
		at := fmt.Sprintf("queries[%d]", i)
		if q.ClusterLabel == "" {
			q.ClusterLabel = DefaultClusterLabel
		}
		if err := contract.ValidateMetricName(q.Metric); err != nil {
			errs = append(errs, fmt.Sprintf("%s.metric: %v", at, err))
		} else if j, dup := metrics[q.Metric]; dup {
			// Two queries feeding one metric would each see the other's values as changes.
			errs = append(errs, fmt.Sprintf("%s.metric: %q is also queries[%d]'s metric", at, q.Metric, j))
		}
		metrics[q.Metric] = i
		if strings.TrimSpace(q.Query) == "" {
			errs = append(errs, at+".query: is required")
		}
		if err := contract.ValidateLabelName(q.ClusterLabel); err != nil {
			errs = append(errs, fmt.Sprintf("%s.clusterLabel: %v", at, err))
		}
		for _, d := range []struct {
			name string
			v    float64
		}{{"absolute", q.Deadband.Absolute}, {"relative", q.Deadband.Relative}} {
			if !(d.v >= 0) || math.IsInf(d.v, 0) {
				errs = append(errs, fmt.Sprintf("%s.deadband.%s: must be a finite number >= 0, not %v", at, d.name, d.v))
			}
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// Load builds the configuration from a file (when path is set) plus one query given by flags
// (when its Query or Metric is set), and validates it.
func Load(path string, single Query) (*Config, error) {
	c := &Config{}
	if path != "" {
		var err error
		if c, err = LoadConfig(path); err != nil {
			return nil, err
		}
	}
	switch {
	case single.Query != "" && single.Metric != "":
		c.Queries = append(c.Queries, single)
	case single.Query != "":
		return nil, errors.New("--query needs --metric: the metric name its samples carry")
	case single.Metric != "":
		return nil, errors.New("--metric needs --query")
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}
