package series

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer/normalize"
)

func f(v float64) *float64 { return &v }

func cs(cluster string, kv ...any) contract.ClusterScores {
	c := contract.ClusterScores{Cluster: cluster}
	for i := 0; i < len(kv); i += 2 {
		c.Scores = append(c.Scores, contract.Score{Name: kv[i].(string), Value: float64(kv[i+1].(int))})
	}
	return c
}

func in(cluster string, v float64, kv ...string) Input {
	m := model.Metric{"cluster": model.LabelValue(cluster)}
	for i := 0; i < len(kv); i += 2 {
		m[model.LabelName(kv[i])] = model.LabelValue(kv[i+1])
	}
	return Input{Metric: m, Value: v}
}

func TestScore(t *testing.T) {
	linear := normalize.Normalization{Method: normalize.MethodLinear, Min: f(0), Max: f(100)}
	tests := []struct {
		name    string
		out     Output
		in      []Input
		want    []contract.ClusterScores
		dropped int
		err     string
	}{
		{
			// linear 0..100: 25 -> 25*2-100 = -50, 80 -> 60, 150 -> clamped 100.
			name: "linear",
			out:  Output{ScoreName: "load", Normalize: linear},
			in:   []Input{in("b", 80), in("a", 25), in("c", 150)},
			want: []contract.ClusterScores{cs("a", "load", -50), cs("b", "load", 60), cs("c", "load", 100)},
		},
		{
			// lower is better: 25 -> -(-50) = 50.
			name: "linear lower is better",
			out:  Output{ScoreName: "load", Normalize: normalize.Normalization{Method: normalize.MethodLinear, Min: f(0), Max: f(100), LowerIsBetter: true}},
			in:   []Input{in("a", 25)},
			want: []contract.ClusterScores{cs("a", "load", 50)},
		},
		{
			// min-max per score name: web;gpu0 has 60 (a) and 90 (b): -100 and 100; 70 (c) is
			// (70-60)*200/30-100 = -33.3 -> -33. db;gpu1 has one value: nothing to compare, 0.
			name: "minmax per name",
			out:  Output{ScoreName: "${app};${device}", Normalize: normalize.Normalization{Method: normalize.MethodMinMax}},
			in: []Input{
				in("a", 60, "app", "web", "device", "gpu0"), in("b", 90, "app", "web", "device", "gpu0"),
				in("c", 70, "app", "web", "device", "gpu0"), in("a", 5, "app", "db", "device", "gpu1"),
			},
			want: []contract.ClusterScores{cs("a", "db;gpu1", 0, "web;gpu0", -100), cs("b", "web;gpu0", 100), cs("c", "web;gpu0", -33)},
		},
		{
			// none: values are scores, rounded half away from zero and clamped: 41.5 -> 42, -0.5 -> -1, 300 -> 100.
			name: "none",
			out:  Output{ScoreName: "s", Normalize: normalize.Normalization{Method: normalize.MethodNone}},
			in:   []Input{in("a", 41.5), in("b", -0.5), in("c", 300)},
			want: []contract.ClusterScores{cs("a", "s", 42), cs("b", "s", -1), cs("c", "s", 100)},
		},
		{
			name:    "no value, no score; bad clusters dropped",
			out:     Output{ScoreName: "s", Normalize: normalize.Normalization{Method: normalize.MethodNone}},
			in:      []Input{in("a", math.NaN()), in("b", math.Inf(1)), in("Bad_Name", 1), in("kube-system", 1), {Metric: model.Metric{}, Value: 1}, in("c", 7)},
			want:    []contract.ClusterScores{cs("c", "s", 7)},
			dropped: 3,
		},
		{
			name:    "some series cannot be named",
			out:     Output{ScoreName: "${device}", Normalize: normalize.Normalization{Method: normalize.MethodNone}},
			in:      []Input{in("a", 1, "device", "gpu0"), in("b", 1), in("c", 1, "device", "has space")},
			want:    []contract.ClusterScores{cs("a", "gpu0", 1)},
			dropped: 2,
		},
		{
			name: "no series can be named",
			out:  Output{ScoreName: "${device}", Normalize: normalize.Normalization{Method: normalize.MethodNone}},
			in:   []Input{in("a", 1), in("b", 1)},
			err:  `no series could be named: score name format "${device}": the series has no label "device"`,
		},
		{
			name: "two series for one score",
			out:  Output{ScoreName: "load", Normalize: linear},
			in:   []Input{in("a", 1, "instance", "x"), in("a", 2, "instance", "y")},
			err:  `two series give cluster "a" the score "load"`,
		},
		{
			name: "nothing",
			out:  Output{ScoreName: "load", Normalize: linear},
			want: []contract.ClusterScores{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.out.Score("cluster", tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Items, tt.want) || got.Dropped != tt.dropped {
				t.Errorf("Score() = %+v dropped %d\nwant %+v dropped %d", got.Items, got.Dropped, tt.want, tt.dropped)
			}
		})
	}
}

func TestFromMatrix(t *testing.T) {
	m := model.Matrix{
		{Metric: model.Metric{"cluster": "a"}, Values: []model.SamplePair{{Timestamp: 1, Value: 10}, {Timestamp: 2, Value: 30}, {Timestamp: 3, Value: 20}}},
		{Metric: model.Metric{"cluster": "b"}},
	}
	for agg, want := range map[string]float64{"last": 20, "avg": 20, "min": 10, "max": 30, "p95": 30} {
		got := FromMatrix(m, agg)
		if got[0].Value != want || !math.IsNaN(got[1].Value) || func() string { c, _ := got[0].Label("cluster"); return c }() != "a" {
			t.Errorf("%s: %+v, want %v and NaN", agg, got, want)
		}
	}
}
