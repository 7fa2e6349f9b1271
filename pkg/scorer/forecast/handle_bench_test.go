package forecast

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/promserver/canned"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// BenchmarkHandle1000 and BenchmarkHandle10000 answer a ping forecasting and scoring 1,000 and
// 10,000 clusters from one range query of 73 points each (6h at 5m) and one capacity query: from
// Prometheus's JSON answers (read and decoded by the scorer's client, in-process) to the
// score.updated encoded.
func BenchmarkHandle1000(b *testing.B)  { benchHandle(b, 1000) }
func BenchmarkHandle10000(b *testing.B) { benchHandle(b, 10000) }

func benchHandle(b *testing.B, n int) {
	end := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	m := make(model.Matrix, n)
	caps := make(model.Vector, n)
	for i := range m {
		cl := model.LabelValue(fmt.Sprintf("cluster-%05d", i))
		s := &model.SampleStream{Metric: model.Metric{"cluster": cl}}
		for j := range 73 {
			at := end.Add(-time.Duration(72-j) * 5 * time.Minute)
			s.Values = append(s.Values, model.SamplePair{Timestamp: model.TimeFromUnixNano(at.UnixNano()), Value: model.SampleValue(float64(i%32) + float64(j%7) + 0.125)})
		}
		m[i] = s
		caps[i] = &model.Sample{Metric: model.Metric{"cluster": cl}, Value: 64, Timestamp: model.TimeFromUnixNano(end.UnixNano())}
	}
	usageQ, capQ := `sum by (cluster) (rate(container_cpu_usage_seconds_total[5m]))`, `sum by (cluster) (kube_node_status_allocatable{resource="cpu"})`
	s := &Scorer{Prom: canned.Querier(b, canned.Transport{usageQ: canned.Matrix(m), capQ: canned.Vector(caps)}),
		Now: func() time.Time { return end.Add(30 * time.Second) }}
	h := scorer.Handler("/scorers/forecast", s.Routes())
	e := functest.Ping(fmt.Sprintf(`{"resource":"r","scoreName":"headroom","query":%q,"capacityQuery":%q,"range":"6h","step":"5m","horizon":"1h"}`, usageQ, capQ))
	canned.BenchHandle(b, h, e, n)
}
