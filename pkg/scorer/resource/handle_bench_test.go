package resource

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/promserver/canned"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// BenchmarkHandle1000 and BenchmarkHandle10000 answer a ping scoring 1,000 and 10,000 clusters
// (3 resources each, the default scores) from the allocatable and requests queries: from
// Prometheus's JSON answers (read and decoded by the scorer's client, in-process) to the
// score.updated encoded.
func BenchmarkHandle1000(b *testing.B)  { benchHandle(b, 1000) }
func BenchmarkHandle10000(b *testing.B) { benchHandle(b, 10000) }

func benchHandle(b *testing.B, n int) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ts := model.TimeFromUnixNano(now.UnixNano())
	var alloc, req model.Vector
	for i := range n {
		cl := model.LabelValue(fmt.Sprintf("cluster-%05d", i))
		for _, r := range []string{"cpu", "memory", "nvidia_com_gpu"} {
			alloc = append(alloc, &model.Sample{Metric: model.Metric{"cluster": cl, "resource": model.LabelValue(r)}, Value: model.SampleValue(64 + i%7), Timestamp: ts})
			req = append(req, &model.Sample{Metric: model.Metric{"cluster": cl, "resource": model.LabelValue(r)}, Value: model.SampleValue(float64(i%50) + 0.5), Timestamp: ts})
		}
	}
	cfg := DefaultConfig()
	allocQ, reqQ := cfg.Queries()
	s := &Scorer{Prom: canned.Querier(b, canned.Transport{allocQ: canned.Vector(alloc), reqQ: canned.Vector(req)}),
		Now: func() time.Time { return now }}
	h := scorer.Handler("/scorers/resource", s.Routes())
	canned.BenchHandle(b, h, functest.Ping(`{}`), n)
}
