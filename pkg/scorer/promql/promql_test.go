package promql

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/harness/benchcpu"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer"
	"github.com/scoreflow/scoreflow/pkg/scorer/normalize"
	"github.com/scoreflow/scoreflow/pkg/scorer/series"
)

func f(v float64) *float64 { return &v }

func cs(cluster string, kv ...any) contract.ClusterScores {
	c := contract.ClusterScores{Cluster: cluster}
	for i := 0; i < len(kv); i += 2 {
		c.Scores = append(c.Scores, contract.Score{Name: kv[i].(string), Value: float64(kv[i+1].(int))})
	}
	return c
}

func TestConfigValidate(t *testing.T) {
	const out = `"resource":"r","scoreName":"s","normalize":{"method":"none"}`
	tests := []struct {
		name  string
		json  string
		quote string // "" = valid
	}{
		{"instant", `{` + out + `,"query":"up"}`, ""},
		{"instant with last", `{` + out + `,"query":"up","aggregation":"last"}`, ""},
		{"range", `{` + out + `,"query":"up","range":"1d","step":"5m","aggregation":"p95","clusterLabel":"cluster_name"}`, ""},
		{"no query", `{` + out + `}`, "query: is required"},
		{"no resource", `{"scoreName":"s","normalize":{"method":"none"},"query":"up"}`, "resource:"},
		{"no scoreName", `{"resource":"r","normalize":{"method":"none"},"query":"up"}`, "scoreName:"},
		{"no normalize", `{"resource":"r","scoreName":"s","query":"up"}`, "normalize.method"},
		{"linear without bounds", `{"resource":"r","scoreName":"s","query":"up","normalize":{"method":"linear"}}`, "normalize: linear needs min and max"},
		{"illegal name format", `{"resource":"r","scoreName":"a b","normalize":{"method":"none"},"query":"up"}`, "scoreName:"},
		{"range without step", `{` + out + `,"query":"up","range":"1h"}`, "range, step: give both"},
		{"aggregation without range", `{` + out + `,"query":"up","aggregation":"avg"}`, `aggregation: "avg" needs a range`},
		{"range without aggregation", `{` + out + `,"query":"up","range":"1h","step":"1m"}`, "aggregation: is required"},
		{"unknown aggregation", `{` + out + `,"query":"up","range":"1h","step":"1m","aggregation":"median"}`, "aggregation:"},
		{"too many points", `{` + out + `,"query":"up","range":"1d","step":"1s","aggregation":"avg"}`, "range, step:"},
		{"bad duration", `{` + out + `,"query":"up","range":"an hour","step":"1m","aggregation":"avg"}`, "not a valid duration"},
		{"bad cluster label", `{` + out + `,"query":"up","clusterLabel":"a-b"}`, "clusterLabel:"},
		{"misspelt", `{` + out + `,"qeury":"up"}`, "qeury"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := cloudevents.NewEvent()
			e.SetID("1")
			e.SetSource("s")
			e.SetType(contract.TypePing)
			_ = e.SetData(cloudevents.ApplicationJSON, []byte(tt.json))
			cfg := DefaultConfig()
			err := scorer.DecodeConfig(e, &cfg)
			if (tt.quote == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.quote)) {
				t.Fatalf("err = %v, want %q", err, tt.quote)
			}
			var se *scorer.Error
			if err != nil && (!errors.As(err, &se) || se.Reason != contract.ReasonBadConfig) {
				t.Errorf("err = %v, want BadConfig", err)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := &Scorer{MetricConfig: &MetricConfig{
		Output:      series.Output{Resource: "gpu-usage-score", ScoreName: "${device}", Normalize: normalize.Normalization{Method: normalize.MethodLinear, Min: f(0), Max: f(100), LowerIsBetter: true}},
		Metric:      "gpu_utilization",
		Aggregation: "avg",
	}}
	if err := s.MetricConfig.Validate(); err != nil {
		t.Fatal(err)
	}
	gpu := func(cluster, device string, v float64, at time.Time) contract.Sample {
		return contract.Sample{Metric: "gpu_utilization", Cluster: cluster, Labels: map[string]string{"device": device}, Value: v, ObservedAt: at}
	}
	e, err := contract.NewMetricChanged("p", t0, contract.MetricChanged{Samples: []contract.Sample{
		// east gpu0: avg(20, 40) = 30 -> -(30*2-100) = 40. Sent out of order: order does not matter for avg.
		gpu("east", "gpu0", 40, t0.Add(time.Minute)), gpu("east", "gpu0", 20, t0),
		// west gpu0: 90 -> -(90*2-100) = -80.
		gpu("west", "gpu0", 90, t0.Add(2*time.Minute)),
		{Metric: "other", Cluster: "west", Value: 1, ObservedAt: t0},
	}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Metrics(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	want := contract.ScoreUpdated{Resource: "gpu-usage-score", Items: []contract.ClusterScores{cs("east", "gpu0", 40), cs("west", "gpu0", -80)}}
	if !reflect.DeepEqual(res.Scores, want) {
		t.Errorf("scores %+v, want %+v", res.Scores, want)
	}
	// The stalest series' latest sample: east's, at t0+1m.
	if !res.Observed.Equal(t0.Add(time.Minute)) {
		t.Errorf("observed %v, want %v", res.Observed, t0.Add(time.Minute))
	}
	if _, ok := (&Scorer{}).Routes()[contract.TypeMetricChanged]; ok {
		t.Error("without a MetricConfig the scorer must not take metric.changed")
	}
}

func vectorN(n int) model.Vector {
	v := make(model.Vector, n)
	for i := range v {
		v[i] = &model.Sample{Metric: model.Metric{"cluster": model.LabelValue(fmt.Sprintf("cluster-%05d", i)), "job": "node"}, Value: model.SampleValue(i % 100)}
	}
	return v
}

// BenchmarkScore1000 and BenchmarkScore10000 score 1,000 and 10,000 clusters from one instant
// query result with min-max.
func BenchmarkScore1000(b *testing.B)  { benchScore(b, 1000) }
func BenchmarkScore10000(b *testing.B) { benchScore(b, 10000) }

func benchScore(b *testing.B, n int) {
	out := series.Output{Resource: "r", ScoreName: "load", Normalize: normalize.Normalization{Method: normalize.MethodMinMax}}
	v := vectorN(n)
	b.ReportAllocs()
	cpu := benchcpu.Start()
	for b.Loop() {
		sc, err := out.Score("cluster", series.FromVector(v))
		if err != nil || len(sc.Items) != n {
			b.Fatal(err, len(sc.Items))
		}
	}
	cpu.Report(b)
}

// BenchmarkScore1000Range and BenchmarkScore10000Range score 1,000 and 10,000 clusters from one
// range query result (31 points each, p95).
func BenchmarkScore1000Range(b *testing.B)  { benchScoreRange(b, 1000) }
func BenchmarkScore10000Range(b *testing.B) { benchScoreRange(b, 10000) }

func benchScoreRange(b *testing.B, n int) {
	m := make(model.Matrix, n)
	for i := range m {
		ss := &model.SampleStream{Metric: model.Metric{"cluster": model.LabelValue(fmt.Sprintf("cluster-%05d", i))}}
		for j := range 31 {
			ss.Values = append(ss.Values, model.SamplePair{Timestamp: model.Time(j * 60000), Value: model.SampleValue((i + j) % 100)})
		}
		m[i] = ss
	}
	out := series.Output{Resource: "r", ScoreName: "load", Normalize: normalize.Normalization{Method: normalize.MethodLinear, Min: f(0), Max: f(100)}}
	b.ReportAllocs()
	cpu := benchcpu.Start()
	for b.Loop() {
		sc, err := out.Score("cluster", series.FromMatrix(m, normalize.AggP95))
		if err != nil || len(sc.Items) != n {
			b.Fatal(err, len(sc.Items))
		}
	}
	cpu.Report(b)
}
