package promql

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scoring"
)

// scoreByMaps is Score for a name without placeholders as it was written before scoreOneName:
// values gathered in a map by cluster, normalised by map, items sorted after.
func scoreByMaps(o *Output, clusterLabel string, in []Input) (Scored, error) {
	var out Scored
	name := string(o.ScoreName)
	vals := map[string]float64{}
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
		if _, dup := vals[cluster]; dup {
			return Scored{}, fmt.Errorf("two series give cluster %q the score %q: aggregate the query by %s and the labels scoreName %q uses", cluster, name, clusterLabel, string(o.ScoreName))
		}
		vals[cluster] = s.Value
	}
	out.Items = make([]contract.ClusterScores, 0, len(vals))
	for cluster, v := range o.Normalize.Apply(vals) {
		out.Items = append(out.Items, contract.ClusterScores{Cluster: cluster, Scores: []contract.Score{{Name: name, Value: float64(v)}}})
	}
	slices.SortFunc(out.Items, func(a, b contract.ClusterScores) int { return cmp.Compare(a.Cluster, b.Cluster) })
	return out, nil
}

// For a score name without placeholders, Score gives what the map-based version gave: the same
// items, drops and errors, on random series with duplicates, bad cluster names, NaN and Inf.
func TestScoreOneNameIsScoreByMaps(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 2))
	lo, hi := -10.0, 90.0
	outputs := []Output{
		{Resource: "r", ScoreName: "load", Normalize: scoring.Normalization{Method: scoring.MethodMinMax}},
		{Resource: "r", ScoreName: "load", Normalize: scoring.Normalization{Method: scoring.MethodMinMax, LowerIsBetter: true}},
		{Resource: "r", ScoreName: "load", Normalize: scoring.Normalization{Method: scoring.MethodLinear, Min: &lo, Max: &hi}},
		{Resource: "r", ScoreName: "load", Normalize: scoring.Normalization{Method: scoring.MethodNone}},
	}
	for range 20000 {
		o := outputs[r.IntN(len(outputs))]
		in := make([]Input, r.IntN(12))
		for i := range in {
			cluster := fmt.Sprintf("c%d", r.IntN(15))
			switch r.IntN(12) {
			case 0:
				cluster = "Bad_Name"
			case 1:
				cluster = "kube-system"
			}
			v := (r.Float64() - 0.2) * 120
			switch r.IntN(10) {
			case 0:
				v = math.NaN()
			case 1:
				v = math.Inf(1)
			case 2:
				v = 7
			}
			if r.IntN(2) == 0 {
				in[i] = Input{Metric: model.Metric{"cluster": model.LabelValue(cluster)}, Value: v}
			} else {
				in[i] = Input{Labels: map[string]string{"cluster": cluster}, Value: v}
			}
			if r.IntN(20) == 0 {
				in[i] = Input{Labels: map[string]string{}, Value: v}
			}
		}
		got, err := o.Score("cluster", in)
		want, wantErr := scoreByMaps(&o, "cluster", in)
		if fmt.Sprint(err) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
			t.Fatalf("%+v on %+v:\n got %+v, %v\nwant %+v, %v", o.Normalize, in, got, err, want, wantErr)
		}
	}
}
