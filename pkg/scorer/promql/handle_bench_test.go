package promql

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/promserver/canned"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

var benchNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// BenchmarkHandle1000 and BenchmarkHandle10000 answer a ping scoring 1,000 and 10,000 clusters
// with min-max from one instant query: from Prometheus's JSON answer (read and decoded by the
// scorer's client, in-process) to the score.updated encoded.
func BenchmarkHandle1000(b *testing.B)  { benchHandle(b, 1000) }
func BenchmarkHandle10000(b *testing.B) { benchHandle(b, 10000) }

func benchHandle(b *testing.B, n int) {
	v := vectorN(n)
	for _, s := range v {
		s.Timestamp = model.TimeFromUnixNano(benchNow.UnixNano())
	}
	q := `sum by (cluster) (rate(node_cpu_seconds_total{mode!="idle"}[5m]))`
	s := &Scorer{Prom: canned.Querier(b, canned.Transport{q: canned.Vector(v)}), Now: func() time.Time { return benchNow }}
	h := scorer.Handler("/scorers/promql", s.Routes())
	e := functest.Ping(fmt.Sprintf(`{"resource":"r","scoreName":"load","normalize":{"method":"minmax"},"query":%q}`, q))
	canned.BenchHandle(b, h, e, n)
}

// BenchmarkHandle1000Range and BenchmarkHandle10000Range do the same from one range query of 31
// points per cluster, reduced by p95.
func BenchmarkHandle1000Range(b *testing.B)  { benchHandleRange(b, 1000) }
func BenchmarkHandle10000Range(b *testing.B) { benchHandleRange(b, 10000) }

func benchHandleRange(b *testing.B, n int) {
	step := time.Minute
	_, end := benchRange(step)
	m := make(model.Matrix, n)
	for i := range m {
		ss := &model.SampleStream{Metric: model.Metric{"cluster": model.LabelValue(fmt.Sprintf("cluster-%05d", i))}}
		for j := range 31 {
			at := end.Add(-time.Duration(30-j) * step)
			ss.Values = append(ss.Values, model.SamplePair{Timestamp: model.TimeFromUnixNano(at.UnixNano()), Value: model.SampleValue(float64((i+j)%100) + 0.25)})
		}
		m[i] = ss
	}
	q := `sum by (cluster) (rate(node_cpu_seconds_total{mode!="idle"}[5m]))`
	s := &Scorer{Prom: canned.Querier(b, canned.Transport{q: canned.Matrix(m)}), Now: func() time.Time { return benchNow }}
	h := scorer.Handler("/scorers/promql", s.Routes())
	e := functest.Ping(fmt.Sprintf(`{"resource":"r","scoreName":"load","normalize":{"method":"linear","min":0,"max":100},"aggregation":"p95","range":"30m","step":"1m","query":%q}`, q))
	canned.BenchHandle(b, h, e, n)
}

func benchRange(step time.Duration) (start, end time.Time) {
	ms := benchNow.UnixMilli()
	ms -= ms % step.Milliseconds()
	end = time.UnixMilli(ms)
	return end.Add(-30 * step), end
}
