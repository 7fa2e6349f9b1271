// Package series turns labelled series, each reduced to one value, into AddOnPlacementScore
// items: one per cluster (from the cluster label), each score named from the series' labels and
// normalised across the clusters of one evaluation. The PromQL scorer scores query results and
// metric.changed samples this way, the forecast scorer its predicted headrooms.
package series

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer/normalize"
)

// DefaultClusterLabel is the label naming the cluster when a configuration names none.
const DefaultClusterLabel = "cluster"

// Output says how values become scores: the part of a scorer's configuration that names the
// resource and its scores and normalises them.
type Output struct {
	// Resource is the AddOnPlacementScore to write.
	Resource string `json:"resource"`
	// ScoreName names each score from its series' labels, e.g. "gpuUtil" or "${app};${device}".
	ScoreName normalize.NameFormat `json:"scoreName"`
	// Normalize maps values to [-100, 100]: linear between bounds, min-max across the clusters of
	// one evaluation (per score name), or none (the values are scores already).
	Normalize normalize.Normalization `json:"normalize"`
}

// Validate checks the output, naming each field at fault.
func (o *Output) Validate() error {
	var errs []error
	if err := contract.ValidateResourceName(o.Resource); err != nil {
		errs = append(errs, fmt.Errorf("resource: %v", err))
	}
	if err := o.ScoreName.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("scoreName: %v", err))
	}
	if err := o.Normalize.Validate(); err != nil {
		// scoring names its own sub-field (normalize.method, normalize: linear needs min and max).
		if !strings.HasPrefix(err.Error(), "normalize") {
			err = fmt.Errorf("normalize: %w", err)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Input is one series reduced to one value.
type Input struct {
	Metric model.Metric
	Value  float64
}

// Label is the value of the series' label k, and whether it has one.
func (in *Input) Label(k string) (string, bool) {
	v, ok := in.Metric[model.LabelName(k)]
	return string(v), ok
}

// FromVector takes an instant query's result.
func FromVector(v model.Vector) []Input {
	in := make([]Input, len(v))
	for i, s := range v {
		in[i] = Input{Metric: s.Metric, Value: float64(s.Value)}
	}
	return in
}

// FromMatrix reduces each series of a range query's result with an aggregation. A series with
// no float points (only histograms, say) reduces to NaN and scores nothing.
func FromMatrix(m model.Matrix, aggregation string) []Input {
	in := make([]Input, len(m))
	vals := make([]float64, 0, 64)
	for i, s := range m {
		vals = vals[:0]
		for _, p := range s.Values {
			vals = append(vals, float64(p.Value))
		}
		in[i] = Input{Metric: s.Metric, Value: normalize.Aggregate(aggregation, vals)}
	}
	return in
}

// Scored is one evaluation's scores.
type Scored struct {
	Items []contract.ClusterScores
	// Dropped counts series left out because their cluster label was missing or not a cluster
	// name, or because ScoreName could not name them; NameErr is the first naming problem.
	Dropped int
	NameErr error
}

// Score turns inputs into one item per cluster, sorted by cluster, scores sorted by name. Values
// are normalised per score name, so min-max compares the clusters' values of one name. NaN and
// infinite values (an empty aggregation, x/0) score nothing. Two series that name the same score of
// the same cluster are an error: the query must aggregate them.
func (o *Output) Score(clusterLabel string, in []Input) (Scored, error) {
	var out Scored
	byName := map[string]map[string]float64{} // score name -> cluster -> value
	for i := range in {
		s := &in[i]
		if math.IsNaN(s.Value) || math.IsInf(s.Value, 0) {
			continue
		}
		cluster, _ := s.Label(clusterLabel)
		if contract.ValidateClusterName(cluster) != nil {
			out.Dropped++
			continue
		}
		name, err := o.ScoreName.NameFrom(s.Label)
		if err != nil {
			out.Dropped++
			if out.NameErr == nil {
				out.NameErr = err
			}
			continue
		}
		if byName[name] == nil {
			byName[name] = map[string]float64{}
		}
		if _, dup := byName[name][cluster]; dup {
			return Scored{}, fmt.Errorf("two series give cluster %q the score %q: aggregate the query by %s and the labels scoreName %q uses", cluster, name, clusterLabel, string(o.ScoreName))
		}
		byName[name][cluster] = s.Value
	}
	perCluster := map[string][]contract.Score{}
	for name, vals := range byName {
		for cluster, v := range o.Normalize.Apply(vals) {
			perCluster[cluster] = append(perCluster[cluster], contract.Score{Name: name, Value: float64(v)})
		}
	}
	out.Items = make([]contract.ClusterScores, 0, len(perCluster))
	for cluster, scores := range perCluster {
		if len(scores) > contract.MaxScoresPerItem {
			return Scored{}, fmt.Errorf("cluster %q gets %d score names from scoreName %q, more than %d", cluster, len(scores), string(o.ScoreName), contract.MaxScoresPerItem)
		}
		slices.SortFunc(scores, func(a, b contract.Score) int { return cmp.Compare(a.Name, b.Name) })
		out.Items = append(out.Items, contract.ClusterScores{Cluster: cluster, Scores: scores})
	}
	slices.SortFunc(out.Items, func(a, b contract.ClusterScores) int { return cmp.Compare(a.Cluster, b.Cluster) })
	if len(out.Items) == 0 && out.NameErr != nil {
		// Every series failed to be named: the configuration does not fit the query.
		return Scored{}, fmt.Errorf("scoreName: no series could be named: %w", out.NameErr)
	}
	return out, nil
}
