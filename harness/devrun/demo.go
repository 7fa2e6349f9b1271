package devrun

import (
	"context"
	"math"
	"time"

	"github.com/scoreflow/scoreflow/harness/promserver"
)

// demoWatcherConfig points the metric-watcher at the demo series instead of node_cpu_seconds_total
// (whose 5-minute rate would move too slowly to watch): same metric name, so the same promql-scorer
// METRIC_CONFIG scores it into cpu-idle/cpuIdle.
const demoWatcherConfig = `queries:
  - metric: cluster_cpu_idle_ratio
    query: avg by (cluster) (scoreflow_demo_cpu_idle_ratio)
    clusterLabel: cluster
    deadband: {absolute: 0.02}
`

// DemoPeriod is how long the demo load takes to go round every cluster: each cluster is the most
// idle for a third of it.
const DemoPeriod = 60 * time.Second

// DemoIdle is cluster i's idle-CPU share at t: phase-shifted waves between 0.1 and 0.9.
func DemoIdle(i, n int, t time.Time) float64 {
	phase := 2*math.Pi*float64(t.UnixMilli()%DemoPeriod.Milliseconds())/float64(DemoPeriod.Milliseconds()) + 2*math.Pi*float64(i)/float64(n)
	return math.Round((0.5+0.4*math.Sin(phase))*1000) / 1000
}

// PushIdle pushes the demo series now, with each named cluster's idle share (DemoManual runs).
func (s *Stack) PushIdle(ctx context.Context, idle map[string]float64) error {
	now := time.Now()
	var series []promserver.Series
	for c, v := range idle {
		series = append(series, promserver.Gauge(map[string]string{"__name__": demoSeries, "cluster": c}, now, v))
	}
	return s.Prometheus.Push(ctx, series...)
}

// demoSeries is the metric the demo feeds and demoWatcherConfig watches.
const demoSeries = "scoreflow_demo_cpu_idle_ratio"

// feedDemo pushes every cluster's idle share to Prometheus every second until ctx ends.
func (s *Stack) feedDemo(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		now := time.Now()
		series := make([]promserver.Series, len(DemoClusters))
		for i, c := range DemoClusters {
			series[i] = promserver.Gauge(map[string]string{"__name__": demoSeries, "cluster": c}, now, DemoIdle(i, len(DemoClusters), now))
		}
		if err := s.Prometheus.Push(ctx, series...); err != nil && ctx.Err() == nil {
			s.opts.Log.Warn("demo: push to Prometheus failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
