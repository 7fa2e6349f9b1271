package promql_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/manifests/lifetime"
	"github.com/scoreflow/scoreflow/harness/promserver"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/scorer"
	"github.com/scoreflow/scoreflow/pkg/scorer/normalize"
	"github.com/scoreflow/scoreflow/pkg/scorer/promql"
	"github.com/scoreflow/scoreflow/pkg/scorer/series"
)

// cs keeps the tables of expected scores short.
var cs = functest.ClusterScores

// l keeps label sets short.
var l = functest.Labels

// series, each on a one-minute grid ending at `at`:
//
//	cpu_util{cluster, instance}  east 25 (one instance), west 75, north 40 and 60 (two instances)
//	latency_ms{cluster}          5 points each: east 10 20 30 40 50, west 50 60 70 80 90, north 20 30 40 50 60
//	gpu_util{cluster,app,device} east web/gpu0 60, east db/gpu1 20, west web/gpu0 90, south web/gpu0 30
//	up{cluster_name}             a series with another cluster label: c9 = 1
//
// south has gpu_util only: it must be absent from every cpu and latency score.
func data(at time.Time) []promserver.Series {
	m := time.Minute
	return []promserver.Series{
		promserver.Gauge(l("__name__", "cpu_util", "cluster", "east", "instance", "e1"), at, 25),
		promserver.Gauge(l("__name__", "cpu_util", "cluster", "west", "instance", "w1"), at, 75),
		promserver.Gauge(l("__name__", "cpu_util", "cluster", "north", "instance", "n1"), at, 40),
		promserver.Gauge(l("__name__", "cpu_util", "cluster", "north", "instance", "n2"), at, 60),
		promserver.Grid(l("__name__", "latency_ms", "cluster", "east"), at, m, 10, 20, 30, 40, 50),
		promserver.Grid(l("__name__", "latency_ms", "cluster", "west"), at, m, 50, 60, 70, 80, 90),
		promserver.Grid(l("__name__", "latency_ms", "cluster", "north"), at, m, 20, 30, 40, 50, 60),
		promserver.Gauge(l("__name__", "gpu_util", "cluster", "east", "app", "web", "device", "gpu0"), at, 60),
		promserver.Gauge(l("__name__", "gpu_util", "cluster", "east", "app", "db", "device", "gpu1"), at, 20),
		promserver.Gauge(l("__name__", "gpu_util", "cluster", "west", "app", "web", "device", "gpu0"), at, 90),
		promserver.Gauge(l("__name__", "gpu_util", "cluster", "south", "app", "web", "device", "gpu0"), at, 30),
		promserver.Gauge(l("__name__", "up", "cluster_name", "c9"), at, 1),
	}
}

func serve(t *testing.T, s *promql.Scorer) string {
	t.Helper()
	fn := function.New("promql-scorer", "test")
	s.Log = fn.Log
	return functest.Serve(t, fn, scorer.Handler(fn.Source(), s.Routes()))
}

func TestAgainstPrometheus(t *testing.T) {
	srv := promserver.Start(t)
	at := promserver.Aligned(time.Minute)
	srv.MustPush(t, data(at)...)
	url := serve(t, &promql.Scorer{Prom: promserver.Client(t, srv.URL), Now: func() time.Time { return at }})

	tests := []struct {
		name string
		ping string
		want contract.ScoreUpdated
		time time.Time
	}{
		{
			// avg by cluster: east 25, west 75, north (40+60)/2 = 50. Linear 0..100, lower is better:
			// score = -(v*200/100 - 100) = 100 - 2v: east 50, west -50, north 0. south has no cpu_util: absent.
			name: "instant, linear, lower is better",
			ping: `{"resource":"cpu-score","query":"avg by (cluster) (cpu_util)","scoreName":"cpuIdle","normalize":{"method":"linear","min":0,"max":100,"lowerIsBetter":true}}`,
			want: contract.ScoreUpdated{Resource: "cpu-score", Items: []contract.ClusterScores{cs("east", "cpuIdle", 50), cs("north", "cpuIdle", 0), cs("west", "cpuIdle", -50)}},
		},
		{
			// query_range over [at-4m, at] step 1m: the 5 grid points. avg: east 30, north 40, west 70.
			// minmax, lower is better: east (best) 100, west -100, north -((40-30)*200/40-100) = 50.
			name: "range avg, minmax",
			ping: `{"resource":"latency","query":"latency_ms","range":"4m","step":"1m","aggregation":"avg","scoreName":"latency","normalize":{"method":"minmax","lowerIsBetter":true}}`,
			want: contract.ScoreUpdated{Resource: "latency", Items: []contract.ClusterScores{cs("east", "latency", 100), cs("north", "latency", 50), cs("west", "latency", -100)}},
		},
		{
			// p95 of 5 points is the 5th smallest (nearest rank ceil(0.95*5) = 5): east 50, north 60,
			// west 90. none: the values are scores already.
			name: "range p95, none",
			ping: `{"resource":"latency-p95","query":"latency_ms","range":"4m","step":"1m","aggregation":"p95","scoreName":"p95","normalize":{"method":"none"}}`,
			want: contract.ScoreUpdated{Resource: "latency-p95", Items: []contract.ClusterScores{cs("east", "p95", 50), cs("north", "p95", 60), cs("west", "p95", 90)}},
		},
		{
			// range 1m, step 1m: the points at at-1m and at. min: east 40, north 50, west 80.
			name: "range min over 1m",
			ping: `{"resource":"latency-min","query":"latency_ms","range":"1m","step":"1m","aggregation":"min","scoreName":"min","normalize":{"method":"none"}}`,
			want: contract.ScoreUpdated{Resource: "latency-min", Items: []contract.ClusterScores{cs("east", "min", 40), cs("north", "min", 50), cs("west", "min", 80)}},
		},
		{
			// ${app};${device}, none: east db;gpu1 20 and web;gpu0 60, south web;gpu0 30, west web;gpu0 90.
			name: "score names from labels",
			ping: `{"resource":"demo-performance-score","query":"gpu_util","scoreName":"${app};${device}","normalize":{"method":"none"}}`,
			want: contract.ScoreUpdated{Resource: "demo-performance-score", Items: []contract.ClusterScores{
				cs("east", "db;gpu1", 20, "web;gpu0", 60), cs("south", "web;gpu0", 30), cs("west", "web;gpu0", 90),
			}},
		},
		{
			// Another cluster label: c9's up is 1, linear 0..1 -> 100.
			name: "cluster label",
			ping: `{"resource":"up","query":"up","clusterLabel":"cluster_name","scoreName":"up","normalize":{"method":"linear","min":0,"max":1}}`,
			want: contract.ScoreUpdated{Resource: "up", Items: []contract.ClusterScores{cs("c9", "up", 100)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { functest.ExpectScores(t, url, tt.ping, tt.want, at) })
	}

	refusals := []struct {
		name   string
		ping   string
		reason contract.Reason
		quote  string
	}{
		{"syntax error", `{"resource":"r","query":"avg by (cluster) (cpu_util","scoreName":"s","normalize":{"method":"none"}}`, contract.ReasonBadQuery, "parse error"},
		{"scalar result", `{"resource":"r","query":"scalar(up)","scoreName":"s","normalize":{"method":"none"}}`, contract.ReasonBadQuery, "the result is a scalar"},
		// north has two cpu_util series: which one is north's score? The query must say.
		{"two series per cluster", `{"resource":"r","query":"cpu_util","scoreName":"s","normalize":{"method":"none"}}`, contract.ReasonBadQuery, `two series give cluster "north"`},
		{"name label missing everywhere", `{"resource":"r","query":"cpu_util","scoreName":"${device}","normalize":{"method":"none"}}`, contract.ReasonBadQuery, `no label "device"`},
		{"no normalize", `{"resource":"r","query":"up","scoreName":"s"}`, contract.ReasonBadConfig, "normalize.method"},
		{"aggregation without range", `{"resource":"r","query":"up","scoreName":"s","aggregation":"avg","normalize":{"method":"none"}}`, contract.ReasonBadConfig, "aggregation"},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			status, reply := functest.Send(t, url, functest.Ping(tt.ping))
			_, fail := functest.Reply(t, reply)
			if status != http.StatusBadRequest || fail == nil || fail.Reason != tt.reason || fail.Retriable || !strings.Contains(fail.Message, tt.quote) {
				t.Errorf("status %d failure %+v, want 400 %s mentioning %q", status, fail, tt.reason, tt.quote)
			}
		})
	}

	t.Run("no series", func(t *testing.T) {
		status, reply := functest.Send(t, url, functest.Ping(`{"resource":"r","query":"no_such_metric","scoreName":"s","normalize":{"method":"none"}}`))
		if status != http.StatusAccepted || reply != nil {
			t.Errorf("status %d reply %v, want 202 and no event", status, reply)
		}
	})

	t.Run("metric.changed refused without --metric-config", func(t *testing.T) {
		e, _ := contract.NewMetricChanged("p", at, contract.MetricChanged{Samples: []contract.Sample{{Metric: "gpu_util", Cluster: "east", Value: 1, ObservedAt: at}}})
		status, reply := functest.Send(t, url, e)
		if _, fail := functest.Reply(t, reply); status != http.StatusBadRequest || fail == nil || fail.Reason != contract.ReasonWrongType {
			t.Errorf("status %d failure %+v, want 400 WrongType", status, fail)
		}
	})

	srv.Stop()
	status, reply := functest.Send(t, url, functest.Ping(`{"resource":"r","query":"up","scoreName":"s","normalize":{"method":"none"}}`))
	if _, fail := functest.Reply(t, reply); status != http.StatusServiceUnavailable || fail == nil || fail.Reason != contract.ReasonMetricsUnavailable || !fail.Retriable {
		t.Errorf("Prometheus down: status %d failure %+v, want 503 retriable MetricsUnavailable", status, fail)
	}
}

// With --metric-config, a metric.changed event is scored from its samples over HTTP.
func TestMetricChangedOverHTTP(t *testing.T) {
	mc := promql.DefaultMetricConfig()
	mc.Output = series.Output{Resource: "gpu-usage-score", ScoreName: "${device}", Normalize: normalize.Normalization{Method: normalize.MethodMinMax, LowerIsBetter: true}}
	mc.Metric = "gpu_util"
	if err := mc.Validate(); err != nil {
		t.Fatal(err)
	}
	url := serve(t, &promql.Scorer{MetricConfig: &mc}) // no Prometheus at all
	at := time.Now().Truncate(time.Second)
	e, err := contract.NewMetricChanged("p", at, contract.MetricChanged{Samples: []contract.Sample{
		{Metric: "gpu_util", Cluster: "east", Labels: map[string]string{"device": "gpu0"}, Value: 10, ObservedAt: at},
		{Metric: "gpu_util", Cluster: "west", Labels: map[string]string{"device": "gpu0"}, Value: 30, ObservedAt: at},
		{Metric: "gpu_util", Cluster: "north", Labels: map[string]string{"device": "gpu0"}, Value: 15, ObservedAt: at},
	}})
	if err != nil {
		t.Fatal(err)
	}
	status, reply := functest.Send(t, url, e)
	got, fail := functest.Reply(t, reply)
	// minmax lower is better over 10..30: east 100, west -100, north -((15-10)*200/20-100) = 50.
	want := contract.ScoreUpdated{Resource: "gpu-usage-score", Items: []contract.ClusterScores{cs("east", "gpu0", 100), cs("north", "gpu0", 50), cs("west", "gpu0", -100)}}
	if status != http.StatusOK || fail != nil || !reflect.DeepEqual(*got, want) {
		t.Errorf("status %d failure %+v scores %+v, want 200 %+v", status, fail, got, want)
	}
}

// TestShippedScheduleStaysValid runs the shipped promql PingSource (deploy/schedules.yaml), as
// shipped and turned into a range query over 30m at 5m steps, against a real Prometheus at each
// of 12 firings of its schedule, and checks that under each TTL the score-writer is shipped with,
// the score written at one firing is still valid when the next firing's score lands (allowing
// 30 s for the ping, the query and the write).
func TestShippedScheduleStaysValid(t *testing.T) {
	deployment := lifetime.Load(t)
	ps := deployment.PingSource(t, "promql-cpu-idle")
	if ps.Spec.CloudEventOverrides.Extensions["scorer"] != "promql-scorer" {
		t.Fatalf("PingSource %s is not the promql-scorer's", ps.Name)
	}
	const landing = 30 * time.Second
	base := promserver.Aligned(5 * time.Minute).Add(-15 * time.Minute)
	firings := lifetime.Firings(t, ps, base.Add(-time.Second), 12, 400*time.Millisecond)

	// Idle CPU counters rising at 0.25 and 0.75 cores every minute, from an hour before the first
	// firing to past the last.
	end := firings[len(firings)-1].Truncate(time.Minute).Add(time.Minute)
	n := int(end.Sub(base.Add(-time.Hour))/time.Minute) + 1
	idle := func(cluster string, perSecond float64) promserver.Series {
		v := make([]float64, n)
		for i := range v {
			v[i] = perSecond * 60 * float64(i)
		}
		return promserver.Grid(l("__name__", "node_cpu_seconds_total", "cluster", cluster, "cpu", "0", "mode", "idle"), end, time.Minute, v...)
	}
	srv := promserver.Start(t)
	srv.MustPush(t, idle("east", 0.25), idle("west", 0.75))
	var now time.Time
	url := serve(t, &promql.Scorer{Prom: promserver.Client(t, srv.URL), Now: func() time.Time { return now }})

	var cfg map[string]any
	if err := json.Unmarshal([]byte(ps.Spec.Data), &cfg); err != nil {
		t.Fatal(err)
	}
	ranged := maps.Clone(cfg)
	ranged["range"], ranged["step"], ranged["aggregation"] = "30m", "5m", "avg"
	for name, c := range map[string]map[string]any{"as shipped": cfg, "range 30m step 5m": ranged} {
		t.Run(name, func(t *testing.T) {
			data, _ := json.Marshal(c)
			var prevAt, prevTime time.Time
			var prev *contract.ScoreUpdated
			for _, at := range firings {
				now = at
				status, reply := functest.Send(t, url, functest.Ping(string(data)))
				su, fail := functest.Reply(t, reply)
				if status != http.StatusOK || fail != nil || len(su.Items) != 2 {
					t.Fatalf("firing at %s: status %d failure %+v scores %+v, want both clusters scored", at.Format(time.TimeOnly), status, fail, su)
				}
				if reply.Time().After(at) {
					t.Errorf("firing at %s: scores dated %s, in the future", at.Format(time.TimeOnly), reply.Time().Format(time.TimeOnly))
				}
				if prev != nil {
					if !reply.Time().After(prevTime) {
						t.Errorf("firing at %s: scores dated %s, not after the previous firing's %s: the writer would not refresh them",
							at.Format(time.TimeOnly), reply.Time().Format(time.TimeOnly), prevTime.Format(time.TimeOnly))
					}
					for _, ttl := range deployment.WriterTTLs {
						if vu := lifetime.WriterValidUntil(prev, prevTime, prevAt, ttl); !vu.IsZero() && !vu.After(at.Add(landing)) {
							t.Errorf("TTL %s: the score of the firing at %s is valid until %s, before the next firing's (%s) lands",
								ttl, prevAt.Format(time.TimeOnly), vu.Format(time.TimeOnly), at.Format(time.TimeOnly))
						}
					}
				}
				prevAt, prevTime, prev = at, reply.Time(), su
			}
		})
	}
}
